#!/usr/bin/env node
// The suite's test files by what they need, read from each file's first line:
//   // needs: nothing | memory host | qemu-img | one VM | many VMs | Postgres | network namespace | chromium ...
// (comma-separated). `fast`: the files that need no VM, network namespace or Postgres (nothing,
// the in-memory host, a tool such as qemu-img or the e2b client),
// which scripts/test.sh runs in parallel and `npm run test:fast` runs alone; `memory`: those of
// them on the in-memory host (the suite runs them once more on Postgres); `vm`: the others.
// Only the packages' own test folders count (subfolders are stages of their own: e2b/, net/, fleet/).
// Prints the compiled files' paths, one a line. A test file without the line is an error:
// where a file goes is its own first line's say, not a list kept here.
import { readFileSync, readdirSync, existsSync } from "node:fs";
import { join } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const which = process.argv[2];
if (!["fast", "memory", "vm"].includes(which)) {
  console.error("usage: test-files.mjs fast|memory|vm");
  process.exit(2);
}
const out = [];
const missing = [];
for (const pkg of readdirSync(join(root, "packages")).sort()) {
  const dir = join(root, "packages", pkg, "test");
  if (!existsSync(dir)) continue;
  for (const f of readdirSync(dir).sort()) {
    if (!f.endsWith(".test.ts")) continue;
    const first = readFileSync(join(dir, f), "utf8").split("\n", 1)[0];
    const m = /^\/\/ needs: (.+)$/.exec(first);
    if (!m) {
      missing.push(`packages/${pkg}/test/${f}`);
      continue;
    }
    const needs = m[1].split(",").map((s) => s.trim().toLowerCase());
    // Anything that boots a VM, or needs the network namespace or Postgres, is not fast.
    const fast = !needs.some((n) => /\bvms?\b|network namespace|postgres/.test(n));
    // (`memory` leaves out the files that run on SQLite only, or use no database at all.)
    const wanted = which === "memory" ? needs.includes("memory host") && !needs.includes("sqlite") && !needs.includes("no database") : fast === (which === "fast");
    if (wanted) out.push(`packages/${pkg}/dist/test/${f.replace(/\.ts$/, ".js")}`);
  }
}
if (missing.length) {
  console.error(`test-files: these test files do not say what they need on their first line ("// needs: ..."):\n  ${missing.join("\n  ")}`);
  process.exit(1);
}
console.log(out.join("\n"));
