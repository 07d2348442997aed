import { writeFileSync } from "node:fs";

/**
 * Crash points for tests: with `DEN_FAULT_POINT=<name>` in the environment, the process
 * dies on the spot (SIGKILL, no cleanup) when it reaches `faultPoint(name)`, after
 * writing the name to `DEN_FAULT_MARKER` so the test can tell the point was reached.
 * Unset (always, in production), it costs one string comparison.
 */
export function faultPoint(name: string): void {
  if (process.env.DEN_FAULT_POINT !== name) return;
  const marker = process.env.DEN_FAULT_MARKER;
  if (marker) writeFileSync(marker, `${name}\n`);
  process.kill(process.pid, "SIGKILL");
}
