/**
 * Operations run once per id: asked again with the same id, a host returns (or joins) the
 * first answer. Both hosts' journal (LocalHostAgent, and the in-memory one for tests).
 */

/** Answers kept for repeated asks; an operation is re-asked within moments, not days. */
const JOURNAL_SIZE = 1024;

export class OpJournal {
  private journal = new Map<string, Promise<unknown>>();

  /** Runs an operation once: asked again with the same id, it returns (or joins) the first answer. */
  once<T>(op: string, fn: () => Promise<T>): Promise<T> {
    const known = this.journal.get(op);
    if (known) return known as Promise<T>;
    const p = fn();
    this.journal.set(op, p);
    // A failed operation may be asked again with the same id once its cause is gone.
    p.catch(() => this.journal.delete(op));
    if (this.journal.size > JOURNAL_SIZE) this.journal.delete(this.journal.keys().next().value!);
    return p;
  }

  /** Resolves once operation `op` (if this process knows it) has ended, either way. */
  async settled(op: string): Promise<void> {
    await this.journal.get(op)?.catch(() => undefined);
  }

  /** Forgets every operation, as a new process would. */
  forget(): void {
    this.journal = new Map();
  }
}
