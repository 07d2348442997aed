/** A host's template builds at once: each runs VMs and fills disks, so a burst waits its turn. */
import { DenError } from "@den/protocol";

/** DEN_MAX_BUILDS_PER_HOST (default 2). */
export function buildsPerHost(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.DEN_MAX_BUILDS_PER_HOST ?? 2);
  return Number.isInteger(n) && n >= 1 ? n : 2;
}

/** A counting semaphore whose waiters can give up (a cancelled build). */
export class Slots {
  private used = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(readonly max: number) {}

  /** Resolves with a release function once a slot is free; `onWait` is called if it must wait. */
  async take(onWait: () => void, signal?: AbortSignal): Promise<() => void> {
    if (this.used >= this.max) {
      onWait();
      await new Promise<void>((resolve, reject) => {
        const go = () => {
          signal?.removeEventListener("abort", cancel);
          resolve();
        };
        const cancel = () => {
          const i = this.waiting.indexOf(go);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(new DenError("aborted", "the build was cancelled"));
        };
        signal?.addEventListener("abort", cancel, { once: true });
        this.waiting.push(go);
      });
    } else this.used++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next) next();
      else this.used--;
    };
  }
}
