/**
 * The frame every call of the in-memory host runs in: a dead host refuses it, it is logged,
 * a fault may hold or fail it, a restart or a death cuts it off (its caller sees the
 * connection go), and an operation runs once per id (the journal, which a restart forgets).
 */
import { DenError } from "@den/protocol";
import { OpJournal } from "../op-journal.js";
import { Faults } from "./faults.js";

/** Control calls kept in the log. */
const CALLS_KEPT = 10_000;

export class CallFrame {
  /** Armed failures, hangs and deaths. */
  readonly faults: Faults;
  /** Every control call, in order, with its arguments (the last 10 000). */
  readonly calls: Array<{ name: string; args: unknown[] }> = [];
  /** The host does not answer (it died, or was closed). */
  dead = false;
  private readonly journal = new OpJournal();
  /** Calls not answered yet: a restart or a death cuts them off. */
  private readonly inFlight = new Set<(why: string) => void>();

  /** `instance`: the host's id, for the errors; `die`: what dying at a fault point does. */
  constructor(private readonly instance: () => string, die: () => void) {
    this.faults = new Faults(die);
  }

  unreachable(what: string): DenError {
    return new DenError("agent_unavailable", `${what}: the host agent ${this.instance()} is unreachable (ECONNREFUSED)`);
  }

  reachable(what: string): void {
    if (this.dead) throw this.unreachable(what);
  }

  /** A control call: refused by a dead host, logged, held or failed by a fault, cut off by a restart. */
  call<T>(name: string, args: unknown[], fn: () => Promise<T>): Promise<T> {
    if (this.dead) return Promise.reject(this.unreachable(name));
    this.calls.push({ name, args });
    if (this.calls.length > CALLS_KEPT) this.calls.shift();
    return new Promise<T>((resolve, reject) => {
      const cut = (why: string) => reject(new DenError("agent_unavailable", `${name}: ${why}`));
      this.inFlight.add(cut);
      this.faults.enter(name).then(fn).then(resolve, reject).finally(() => this.inFlight.delete(cut));
    });
  }

  /** A call that runs once per operation id (`name`: its route's, which faults and the log go by). */
  op<T>(name: string, args: unknown[], op: string, fn: () => T | Promise<T>): Promise<T> {
    return this.call(name, args, () => this.once(op, async () => fn()));
  }

  /** A call with no operation id. */
  plain<T>(name: string, args: unknown[], fn: () => T | Promise<T>): Promise<T> {
    return this.call(name, args, async () => fn());
  }

  /** Runs an operation once: asked again with the same id, it returns (or joins) the first answer (as the real host). */
  once<T>(op: string, fn: () => Promise<T>): Promise<T> {
    return this.journal.once(op, fn);
  }

  /** Resolves once operation `op` (if this process knows it) has ended, either way. */
  settled(op: string): Promise<void> {
    return this.journal.settled(op);
  }

  /** The calls in flight fail (their work may still finish); the journal is forgotten, as by a new process. */
  cut(why: string): void {
    for (const c of [...this.inFlight]) c(why);
    this.inFlight.clear();
    this.journal.forget();
  }
}
