import { chmodSync, existsSync, mkdirSync } from "node:fs";

/**
 * Creates `dir` (and its parents) readable by its owner alone, and takes that away from
 * group and others on one that exists: a data dir holds users' secrets (sandbox env vars,
 * the database) and guests' memory images. (The runtime's and the control plane's.)
 */
export function privateDir(dir: string): void {
  if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
}
