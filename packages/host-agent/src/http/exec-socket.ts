import type { WebSocket } from "ws";
import { DenError, host, type GuestExecProcess, type HostGuest, parseInput } from "@den/protocol";
import { execOptions } from "./guest-routes.js";
import { pacedInput } from "./paced-input.js";
import { asDenError, errorBody } from "./wire-errors.js";

/** Output waits in the guest while this much is unsent on the socket: the guest runs no further ahead of the reader. */
export const SOCKET_HIGH_WATER = 1024 * 1024;

const send = (ws: WebSocket, m: host.ExecServerMessage) => {
  if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(m));
};

/**
 * Sends a frame; past the high-water mark it resolves only once the frame has gone out to
 * the network, so the caller pulls the next chunk (and the guest gets credit) only then.
 */
function sendPaced(ws: WebSocket, frame: Buffer): Promise<void> | undefined {
  if (ws.bufferedAmount + frame.length <= SOCKET_HIGH_WATER) {
    ws.send(frame, { binary: true });
    return undefined;
  }
  return new Promise((resolve) => ws.send(frame, { binary: true }, () => resolve()));
}

/**
 * One streamed exec over a WebSocket (`/host/v1/sandboxes/:id/exec/ws`): the first
 * message is the request; then output goes out as `[channel, ...bytes]` only as fast as
 * the socket drains, stdin comes in the same way, and control messages are answered by id.
 */
export function serveExecSocket(ws: WebSocket, guest: () => HostGuest): void {
  let proc: GuestExecProcess | undefined;
  let exited = false;
  let stdin: ReturnType<typeof pacedInput> | undefined;
  const fail = (e: unknown) => {
    send(ws, { type: "error", error: errorBody(asDenError(e)).error });
    ws.close(1011);
  };

  const onControl = (p: GuestExecProcess, data: Buffer, isBinary: boolean) => {
    if (isBinary) {
      if (data[0] !== host.ExecChannel.stdin) return fail(new DenError("invalid_argument", "binary messages to the host are stdin: channel 0"));
      (stdin ??= pacedInput(ws, (b) => p.write(b))).push(data.subarray(1));
      return;
    }
    let m: host.ExecClientMessage;
    try {
      m = parseInput(host.ExecClientMessage, JSON.parse(data.toString("utf8")), "control message");
    } catch (e) {
      return fail(e);
    }
    if (m.type === "close_stdin") {
      // After what was written before it.
      (stdin ??= pacedInput(ws, (b) => p.write(b))).after(() => p.closeStdin());
      return;
    }
    const done = m.type === "resize" ? p.resize(m.rows, m.cols) : m.type === "signal" ? p.signal(m.signal) : p.kill();
    done.then(
      () => send(ws, { type: "ack", id: m.id }),
      (e: unknown) => send(ws, { type: "ack", id: m.id, error: errorBody(asDenError(e)).error }),
    );
  };

  ws.once("message", (data: Buffer, isBinary: boolean) => {
    // Nothing else is read until the process exists: later messages wait in the socket, in order.
    ws.pause();
    void (async () => {
      try {
        if (isBinary) throw new DenError("invalid_argument", "the first message is the exec request (JSON text)");
        const req = parseInput(host.ExecRequest, JSON.parse(data.toString("utf8")), "exec request");
        const p = await guest().execStream(req.command, execOptions(req.options));
        proc = p;
        if (ws.readyState !== ws.OPEN) {
          await p.kill().catch(() => undefined);
          return;
        }
        send(ws, { type: "started", proc: p.proc, pid: p.pid });
        ws.on("message", (d: Buffer, bin: boolean) => onControl(p, d, bin));
        ws.resume();
        for await (const c of p) {
          if (ws.readyState !== ws.OPEN) break;
          await sendPaced(ws, Buffer.concat([Buffer.of(c.stream === "stdout" ? host.ExecChannel.stdout : host.ExecChannel.stderr), c.data]));
        }
        const exit = await p.wait();
        exited = true;
        send(ws, { type: "exit", ...exit });
        ws.close(1000);
      } catch (e) {
        exited = true;
        fail(e);
      }
    })();
  });

  // A caller that goes away takes its command with it.
  ws.on("close", () => {
    if (proc && !exited) proc.kill().catch(() => undefined);
  });
  ws.on("error", () => undefined);
}
