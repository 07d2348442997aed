// needs: one VM
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { basename, join } from "node:path";
import { after, before, describe, test } from "node:test";
import { isAlive, spawnQemu, VM_FILES, type VmSpec } from "../src/qemu.js";
import { TEMPLATE_FILES } from "../src/templates.js";
import { Vm } from "../src/vm.js";
import type { Runtime } from "../src/runtime.js";
import { isCode, qemuProcesses, testRuntime } from "./helpers.js";

/**
 * QEMU 7.2 binds a stream netdev's socket in a thread of its own, and marks the NIC's link
 * down only once that bind has worked. When it does not (the thread ran after QEMU's chroot
 * and uid change), the link is up with no socket behind it, and QEMU segfaults on the first
 * packet it has to send there: the self-announce a restore queues and sends at `cont`. These
 * tests make the bind fail on purpose.
 */
describe("a VM whose network socket could not be bound", () => {
  let rt: Runtime;
  let dir: string;
  let spec: VmSpec;

  before(async () => {
    rt = await testRuntime();
    dir = mkdtempSync(join(rt.dataDir, "nic-"));
    const tpl = (await rt.templates.resolve("base")).dir;
    execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", join(tpl, TEMPLATE_FILES.disk), join(dir, VM_FILES.disk)]);
    spec = {
      dir, vcpus: 1, memoryMb: 512, memoryFile: join(tpl, TEMPLATE_FILES.memory), shareMemory: false,
      disk: join(dir, VM_FILES.disk), backing: rt.templates.diskChain({ name: "base", version: basename(tpl) }), incoming: true, incomingState: join(tpl, TEMPLATE_FILES.state),
      macAddress: "52:54:00:de:4e:01", tag: { instance: rt.instance, sandbox: "sbx_nictest" },
    };
    // QEMU removes whatever file is where its socket goes, then binds: a folder there fails both.
    mkdirSync(join(dir, VM_FILES.net), { recursive: true });
  });

  after(() => {
    rmSync(dir, { recursive: true, force: true });
    rt?.close();
  });

  test("is not used: the launch tries again, then fails with qemu_error and leaves no QEMU", async () => {
    const launched = await Vm.launch(spec, rt.host).then((vm) => vm, (e: unknown) => e);
    if (launched instanceof Vm) await launched.kill();
    assert.ok(isCode("qemu_error")(launched) && /network socket/.test((launched as Error).message), `launch gave ${launched instanceof Vm ? "a running VM" : launched}`);
    assert.equal(qemuProcesses(rt).size, 0);
  });

  test("survives a restore's cont all the same: Den turns the self-announce off", async () => {
    // (spawned and attached as launch does, less its socket check)
    const pid = spawnQemu(spec, rt.host);
    const vm = await Vm.attach(dir, pid, { incomingState: spec.incomingState! });
    try {
      await vm.loadState(spec.incomingState!);
      await vm.cont();
      await new Promise((r) => setTimeout(r, 1000));
      assert.ok(isAlive(pid), "QEMU is still there a second after cont");
      assert.equal(await vm.status(), "running");
    } finally {
      await vm.kill();
    }
  });
});
