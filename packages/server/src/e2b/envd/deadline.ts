import { DenError } from "@den/protocol";

/** A guest call that a wedged guest must not hold forever. */
export const GUEST_CALL_MS = 30_000;

/**
 * `p`, or a `timeout` DenError after `ms`. The call itself finishes or fails on its own;
 * `onLate` gets a result that arrives after the deadline (to undo it: kill a late process).
 */
export function withDeadline<T>(p: Promise<T>, what: string, ms = GUEST_CALL_MS, onLate?: (v: T) => void): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let expired = false;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      expired = true;
      reject(new DenError("timeout", `${what}: no answer within ${ms} ms`));
    }, ms);
  });
  p.then((v) => {
    if (expired) onLate?.(v);
  }, () => undefined);
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}
