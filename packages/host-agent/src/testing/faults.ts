/**
 * Fault injection for the in-memory host: calls that fail or hang (by method name, control
 * or guest: `upload`, `exec`, `files.write`, ...) and named steps inside operations that
 * fail or kill the host (the real host's `faultPoint` names where the step is the same).
 */
import { DenError } from "@den/protocol";
import { faultPoint } from "@den/store";

interface Failure {
  error: Error;
  left: number;
}

type PointRule = { kind: "fail"; error: Error; left: number } | { kind: "die"; left: 1 };

const injected = (what: string) => new DenError("internal", `${what}: a failure injected by the test`);

export class Faults {
  private readonly failures = new Map<string, Failure[]>();
  private readonly hangs = new Map<string, { released: Promise<void>; release: () => void }>();
  private readonly points = new Map<string, PointRule[]>();

  /** `die`: what dying at a step does to the host (set by the host). */
  constructor(private readonly die: () => void) {}

  /**
   * The next `times` calls of `call` (default 1; `Infinity`: until disarmed) fail with
   * `error` (default: an `internal` error). Returns the disarm function.
   */
  fail(call: string, error: Error = injected(call), opts: { times?: number } = {}): () => void {
    return this.arm(this.failures, call, { error, left: opts.times ?? 1 });
  }

  /** Every call of `call` from now on waits, unsettled, until the returned function is called. */
  hang(call: string): () => void {
    const known = this.hangs.get(call);
    if (known) return known.release;
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const entry = {
      released,
      release: () => {
        if (this.hangs.get(call) === entry) this.hangs.delete(call);
        release();
      },
    };
    this.hangs.set(call, entry);
    return entry.release;
  }

  /** The operation passing step `point` fails there with `error` (the next `times` times, default 1). */
  failAt(point: string, error: Error = injected(point), opts: { times?: number } = {}): () => void {
    return this.arm(this.points, point, { kind: "fail", error, left: opts.times ?? 1 });
  }

  /** The host dies (`die()`) when an operation passes step `point`, once. */
  dieAt(point: string): () => void {
    return this.arm(this.points, point, { kind: "die", left: 1 });
  }

  /** Disarms everything and lets every hung call go. */
  clear(): void {
    this.failures.clear();
    this.points.clear();
    for (const h of [...this.hangs.values()]) h.release();
  }

  /** At the start of a call: a failure armed for it is thrown; a hang holds it until released. */
  async enter(call: string): Promise<void> {
    const hang = this.hangs.get(call);
    if (hang) await hang.released;
    const f = this.take(this.failures, call);
    if (f) throw f.error;
  }

  /**
   * At a named step of an operation: `DEN_FAULT_POINT` kills the process here as it would
   * the real host; then whatever a test armed for the step.
   */
  at(point: string): void {
    faultPoint(point);
    const rule = this.take(this.points, point);
    if (!rule) return;
    if (rule.kind === "fail") throw rule.error;
    this.die();
    throw new DenError("agent_unavailable", `the host agent died at ${point}`);
  }

  private arm<R>(rules: Map<string, R[]>, name: string, rule: R): () => void {
    const list = rules.get(name) ?? [];
    list.push(rule);
    rules.set(name, list);
    return () => {
      const i = list.indexOf(rule);
      if (i >= 0) list.splice(i, 1);
    };
  }

  /** The first rule armed for `name`, used once. */
  private take<R extends { left: number }>(rules: Map<string, R[]>, name: string): R | undefined {
    const list = rules.get(name);
    const rule = list?.[0];
    if (!list || !rule) return undefined;
    if (--rule.left <= 0) list.shift();
    return rule;
  }
}
