// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { hasExited, killAndWait } from "../src/qemu.js";

const state = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
  return stat.charAt(stat.lastIndexOf(")") + 2);
};

test("a killed process whose parent does not reap it has exited: its zombie holds only its pid", async () => {
  // The shell starts a sleep and becomes another one, which never waits for it: the first
  // sleep's zombie stays until the shell goes (as an adopted QEMU's stays until init reaps it).
  const parent = spawn("bash", ["-c", "sleep 60 & echo $!; exec sleep 60"], { stdio: ["ignore", "pipe", "ignore"] });
  try {
    const pid = Number(await new Promise<string>((r) => parent.stdout!.once("data", (d: Buffer) => r(d.toString().trim()))));
    assert.ok(pid > 0);
    assert.equal(hasExited(pid), false, "a sleeping process has not exited");
    await killAndWait(pid, 5000);
    assert.equal(hasExited(pid), true);
    assert.ok(existsSync(`/proc/${pid}`), "still a zombie: nobody reaped it");
    assert.equal(state(pid), "Z");
  } finally {
    parent.kill("SIGKILL");
  }
});

test("a process that does not exist has exited; killAndWait of it returns", async () => {
  const child = spawn("true");
  await new Promise((r) => child.once("exit", r));
  assert.equal(hasExited(child.pid!), true);
  await killAndWait(child.pid!);
});
