// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Runtime, Sandbox } from "../src/index.js";
import { QEMU_PIDS_MAX, memoryLimitMb, VmCgroups, cpuCeiling } from "../src/jail/cgroups.js";
import { hostCgroups } from "../src/jail/host.js";
import { vmIdentity } from "../src/jail/identity.js";
import { HOST_CAPABILITIES, boundingSetArg, capabilityNames, processCapabilities } from "../src/jail/capabilities.js";
import { isAlive, processTags } from "../src/qemu.js";
import { testRuntime, untilPooled } from "./helpers.js";

const read = (p: string) => readFileSync(p, "utf8").trim();

describe("cgroup writers (against a temporary dir)", () => {
  const tmp = mkdtempSync(join(tmpdir(), "den-cgroups-"));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  test("v1: cpu shares and quota, memory limit and pids in their own hierarchies, the process in each", () => {
    const root = join(tmp, "v1");
    for (const c of ["cpu", "memory", "pids"]) mkdirSync(join(root, c), { recursive: true });
    const cg = VmCgroups.at(root, 1);
    cg.place("den_i", "sbx_a", 4242, { vcpus: 2, memoryMb: 1024 });
    const d = cg.dirs("den_i", "sbx_a");
    assert.equal(read(join(d.cpu!, "cpu.shares")), "2048");
    assert.equal(read(join(d.cpu!, "cpu.cfs_quota_us")), "200000");
    assert.equal(read(join(d.cpu!, "cpu.cfs_period_us")), "100000");
    assert.equal(read(join(d.memory!, "memory.limit_in_bytes")), String((2 * 1024 + 384) * 1024 * 1024));
    assert.equal(read(join(d.pids!, "pids.max")), String(QEMU_PIDS_MAX));
    for (const dir of Object.values(d)) assert.equal(read(join(dir, "cgroup.procs")), "4242");
  });

  test("a VM's CPU ceiling is its vCPUs, but never its whole host", () => {
    assert.equal(cpuCeiling(1, 8), 1);
    assert.equal(cpuCeiling(4, 8), 4);
    assert.equal(cpuCeiling(2, 2), 1.5, "half a core stays for Den and the neighbours");
    assert.equal(cpuCeiling(8, 1), 0.5);
    const root = join(tmp, "ceiling");
    for (const c of ["cpu", "memory", "pids"]) mkdirSync(join(root, c), { recursive: true });
    const cg = VmCgroups.at(root, 1);
    cg.place("den_i", "sbx_b", 4243, { vcpus: 2, memoryMb: 512, cpuMax: 1.5 });
    assert.equal(read(join(cg.dirs("den_i", "sbx_b").cpu!, "cpu.cfs_quota_us")), "150000");
    assert.equal(read(join(cg.dirs("den_i", "sbx_b").cpu!, "cpu.shares")), "2048", "its weight is still by its vCPUs");
  });

  // Written against the kernel's cgroup-v2 documentation; no v2 host runs it (docs/security.md says so).
  test("v2: controllers handed down to the VM's cgroup; cpu.max, cpu.weight, memory.max, pids.max", () => {
    const root = join(tmp, "v2");
    mkdirSync(root, { recursive: true });
    writeFileSync(join(root, "cgroup.controllers"), "cpuset cpu io memory pids");
    writeFileSync(join(root, "cgroup.subtree_control"), "");
    const cg = VmCgroups.at(root, 2);
    cg.place("den_i", "sbx_a", 4242, { vcpus: 2, memoryMb: 1024 });
    const d = cg.dirs("den_i", "sbx_a").unified!;
    assert.equal(d, join(root, "den", "den_i", "sbx_a"));
    for (const level of [root, join(root, "den"), join(root, "den", "den_i")]) assert.equal(read(join(level, "cgroup.subtree_control")), "+cpu +memory +pids");
    assert.equal(read(join(d, "cpu.max")), "200000 100000");
    assert.equal(read(join(d, "cpu.weight")), "200");
    assert.equal(read(join(d, "memory.max")), String((2 * 1024 + 384) * 1024 * 1024));
    assert.equal(read(join(d, "pids.max")), String(QEMU_PIDS_MAX));
    assert.equal(read(join(d, "cgroup.procs")), "4242");
  });
});

describe("Den's own capabilities", () => {
  test("capability masks read as names; the bounding set keeps exactly the ones Den uses", () => {
    assert.deepEqual(capabilityNames("0000000000003001"), ["chown", "net_admin", "net_raw"]);
    assert.deepEqual(capabilityNames("0000010000000000"), ["checkpoint_restore"]);
    assert.deepEqual(capabilityNames("8000000000000000"), ["cap_63"]);
    assert.match(boundingSetArg(), /^-all,\+chown,.*\+sys_admin$/);
  });

  test("the host agent's systemd unit bounds it to the same capabilities", () => {
    const repo = join(dirname(fileURLToPath(import.meta.url)), "../../../..");
    const unit = readFileSync(join(repo, "deploy/den-host-agent.service"), "utf8");
    const listed = /^CapabilityBoundingSet=(.*)$/m.exec(unit)?.[1]?.split(/\s+/).map((c) => c.replace(/^CAP_/, "").toLowerCase());
    assert.deepEqual(listed?.sort(), [...HOST_CAPABILITIES].sort());
  });

  // The test script runs the VM stages under `setpriv --bounding-set` of HOST_CAPABILITIES
  // (DEN_TEST_BOUNDED_CAPS=1): every VM test after this one proves the set is enough.
  test("the suite's VM stages run with only those capabilities", { skip: process.env.DEN_TEST_BOUNDED_CAPS !== "1" && "not run by scripts/test.sh" }, () => {
    const caps = processCapabilities();
    assert.deepEqual(caps.CapBnd.sort(), [...HOST_CAPABILITIES].sort());
    assert.deepEqual(caps.CapPrm.sort(), [...HOST_CAPABILITIES].sort());
  });
});

describe("the jailed QEMU (a real VM)", () => {
  let rt: Runtime;
  let sbx: Sandbox;
  before(async () => {
    rt = await testRuntime();
    // A pooled QEMU: jailed at its spawn, in a directory renamed to the sandbox's at the claim.
    await rt.prewarm();
    await untilPooled(rt);
    sbx = await rt.create({ template: "base" });
  });
  after(async () => {
    await sbx?.destroy().catch(() => undefined);
    rt?.close();
  });

  test("runs as its own non-zero uid, chrooted to its jail, in its cgroups with the limits set; snapshots still work", async () => {
    const pid = sbx.pid!;
    // Its uid and cgroup go by the tag its QEMU was started with: the sandbox's id, or a pooled VM's.
    const tag = processTags(pid)!;
    assert.equal(tag.sandbox, sbx.id);
    assert.match(tag.vm, /^vm_/, "a pooled QEMU");
    const id = vmIdentity(rt.instance, tag.vm);
    assert.ok(id.uid > 0);
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    assert.match(status, new RegExp(`^Uid:\\s+${id.uid}\\s+${id.uid}\\s+${id.uid}\\s+${id.uid}$`, "m"));
    assert.match(status, new RegExp(`^Gid:\\s+${id.gid}\\s+${id.gid}\\s+${id.gid}\\s+${id.gid}$`, "m"));
    assert.match(status, new RegExp(`^Groups:\\s*(${id.gid})?\\s*$`, "m"), "no group but its own");
    assert.equal(readlinkSync(`/proc/${pid}/root`), join(sbx.dir, "jail"));
    const cg = hostCgroups();
    assert.ok(cg, "this host's cgroups are writable");
    const cgroup = readFileSync(`/proc/${pid}/cgroup`, "utf8");
    for (const c of ["cpu", "memory", "pids"]) assert.match(cgroup, new RegExp(`:${c}:/den/${rt.instance}/${tag.vm}$`, "m"));
    const d = cg!.dirs(rt.instance, tag.vm);
    assert.equal(read(join(d.memory!, "memory.limit_in_bytes")), String(memoryLimitMb(sbx.info.memoryMb) * 1024 * 1024));
    assert.equal(read(join(d.cpu!, "cpu.cfs_quota_us")), String(Math.round(cpuCeiling(sbx.info.vcpus) * 100_000)));
    assert.equal(read(join(d.pids!, "pids.max")), String(QEMU_PIDS_MAX));
    // The state moves over a socket in the jail now: a snapshot and a restore of it work.
    const snap = await rt.snapshot(sbx.id);
    const copy = await rt.restore(snap.id);
    try {
      assert.equal((await copy.exec("echo restored")).stdout.toString(), "restored\n");
    } finally {
      await copy.destroy();
      await rt.deleteSnapshot(snap.id);
    }
  });

  test("a QMP migrate to exec: kills QEMU (seccomp: it may not fork)", async () => {
    const pid = sbx.pid!;
    const qmp = (sbx as unknown as { core: { vm: { qmp: { execute(c: string, a?: unknown): Promise<unknown> } } } }).core.vm.qmp;
    await qmp.execute("migrate", { uri: "exec:cat > /dev/null" }).catch(() => undefined);
    const deadline = Date.now() + 10_000;
    while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(isAlive(pid), false, "QEMU died at its fork");
  });
});
