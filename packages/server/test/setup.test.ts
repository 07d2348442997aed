// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { CLI } from "./helpers.js";

const ROOT = join(CLI, "..", "..", "..", "..", "..");

// npm ci runs before tsc builds the CLI, so npm links no `den`: scripts/setup.sh links it
// after the build (the README's quick start runs `npx den` right after `npm start`).
test("after scripts/setup.sh, `npx den --help` from the repo root runs the CLI", async () => {
  const r = await new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
    // --no-install: the repo's own link or nothing, never a package of that name from the registry.
    const c = spawn("npx", ["--no-install", "den", "--help"], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    c.stdout.on("data", (d: Buffer) => (out += d));
    c.stderr.on("data", (d: Buffer) => (err += d));
    c.on("close", (code) => resolve({ code, out, err }));
  });
  assert.equal(r.code, 0, `npx den --help in ${ROOT}: ${r.err}`);
  assert.match(r.out, /^Usage: den /m);
});
