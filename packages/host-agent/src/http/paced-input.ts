import type { WebSocket } from "ws";

/** Input bytes a WebSocket may have in flight towards a slower sink before it stops reading. */
export const INPUT_HIGH_WATER = 1024 * 1024;

/**
 * Input from a WebSocket written in order to a sink that takes its time (a guest's stdin,
 * which waits for the guest's credit): past `highWater` bytes in flight the socket stops
 * reading, so the sender is held back by TCP instead of growing this process's memory.
 * `after` queues a step behind what was written so far (closing stdin).
 */
export function pacedInput(ws: WebSocket, write: (b: Buffer) => Promise<void>, highWater = INPUT_HIGH_WATER) {
  let chain: Promise<void> = Promise.resolve();
  let inFlight = 0;
  return {
    push(bytes: Buffer): void {
      inFlight += bytes.length;
      if (inFlight > highWater && !ws.isPaused) ws.pause();
      chain = chain.then(() => write(bytes)).catch(() => undefined).finally(() => {
        inFlight -= bytes.length;
        if (inFlight <= highWater && ws.isPaused) ws.resume();
      });
    },
    after(step: () => unknown): void {
      chain = chain.then(async () => void (await step())).catch(() => undefined);
    },
  };
}
