/**
 * Operations on one sandbox from this process run one after another, so two API calls
 * at once queue instead of one getting `operation_in_progress`. The database's
 * compare-and-set is what keeps them correct; this only keeps them polite.
 */
export class Serializer {
  private queues = new Map<string, Promise<unknown>>();

  /** Runs `fn` after every earlier operation on the same sandbox has settled. */
  run<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.queues.get(id) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.queues.set(id, tail);
    void tail.then(() => {
      if (this.queues.get(id) === tail) this.queues.delete(id);
    });
    return next;
  }

  /** Whether an operation on this sandbox is queued or running here. */
  busy(id: string): boolean {
    return this.queues.has(id);
  }

  /** Resolves once every operation queued on this sandbox so far has settled. */
  async idle(id: string): Promise<void> {
    while (this.queues.has(id)) await this.queues.get(id);
  }
}
