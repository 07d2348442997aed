import type { z } from "zod";
import { DenError } from "./errors.js";

/**
 * Checks a request part against its schema: a mismatch is the caller's `invalid_argument`,
 * naming `what` and the first field that is wrong.
 */
export function parseInput<S extends z.ZodType>(schema: S, value: unknown, what: string): z.infer<S> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const first = r.error.issues[0];
  const where = first?.path.length ? `${first.path.map(String).join(".")}: ` : "";
  throw new DenError("invalid_argument", `${what} ${where}${first?.message ?? "is invalid"}`);
}
