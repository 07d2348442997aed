import { readFileSync, writeFileSync } from "node:fs";

/**
 * Crash points for tests: with `DEN_FAULT_POINT=<name>` in the environment, the process
 * dies on the spot (SIGKILL, no cleanup) when it reaches `faultPoint(name)`, after
 * writing the name to `DEN_FAULT_MARKER` so the test can tell the point was reached.
 * `DEN_FAULT_POINT_FILE=<path>` arms the point named in that file instead, read at each
 * point, so a test can arm a running process without restarting it. Unset (always, in
 * production), it costs two property reads.
 */
export function faultPoint(name: string): void {
  if (armedPoint() !== name) return;
  const marker = process.env.DEN_FAULT_MARKER;
  if (marker) writeFileSync(marker, `${name}\n`);
  process.kill(process.pid, "SIGKILL");
}

function armedPoint(): string | undefined {
  const named = process.env.DEN_FAULT_POINT;
  if (named !== undefined) return named;
  const file = process.env.DEN_FAULT_POINT_FILE;
  if (file === undefined) return undefined;
  try {
    return readFileSync(file, "utf8").trim();
  } catch {
    return undefined; // not armed
  }
}
