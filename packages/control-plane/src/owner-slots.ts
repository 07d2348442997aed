import { DenError } from "@den/protocol";

/**
 * A per-owner bound on something a request holds while it runs (a buffered exec's output,
 * an open stream): past `max` at once, the next is a 429 `limit_exceeded`. Counted per
 * control-plane process: what it bounds is that process's memory and sockets.
 */
export class OwnerSlots {
  private readonly held = new Map<string, number>();

  constructor(readonly max: number, private readonly what: string, private readonly env: string) {}

  /** Takes a slot for `owner`; the returned function gives it back (once, however often it is called). */
  take(owner: string): () => void {
    const n = this.held.get(owner) ?? 0;
    if (n >= this.max) throw new DenError("limit_exceeded", `at most ${this.max} ${this.what} at once per owner (${this.env})`);
    this.held.set(owner, n + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = (this.held.get(owner) ?? 1) - 1;
      if (left > 0) this.held.set(owner, left);
      else this.held.delete(owner);
    };
  }

  /** Runs `fn` holding a slot. */
  async with<T>(owner: string, fn: () => Promise<T>): Promise<T> {
    const release = this.take(owner);
    try {
      return await fn();
    } finally {
      release();
    }
  }
}
