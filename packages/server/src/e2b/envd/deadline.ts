import { DenError } from "@den/protocol";

/** A guest call that a wedged guest must not hold forever. */
export const GUEST_CALL_MS = 30_000;

/** `p`, or a `timeout` DenError after `ms` (the call itself is left to finish or fail on its own). */
export function withDeadline<T>(p: Promise<T>, what: string, ms = GUEST_CALL_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DenError("timeout", `${what}: no answer within ${ms} ms`)), ms);
  });
  p.catch(() => undefined);
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}
