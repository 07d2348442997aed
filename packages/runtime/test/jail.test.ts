// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { chownSync, closeSync, lchownSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import net from "node:net";
import { networkInterfaces, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Runtime, Sandbox } from "../src/index.js";
import { QEMU_PIDS_MAX, memoryLimitMb, VmCgroups, cpuCeiling } from "../src/jail/cgroups.js";
import { hostCgroups } from "../src/jail/host.js";
import { vmIdentity } from "../src/jail/identity.js";
import { HOST_CAPABILITIES, boundingSetArg, capabilityNames, processCapabilities } from "../src/jail/capabilities.js";
import { findInstanceProcesses, hasExited, processTags } from "../src/qemu.js";
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

  /** Runs `node -e code` as the escaped QEMU would be: its uid and gid, no groups, in its network namespace. */
  const asEscapedQemu = (pid: number, code: string, extraFds: number[] = []) => {
    const tag = processTags(pid)!;
    const id = vmIdentity(rt.instance, tag.vm);
    return spawnSync("nsenter", ["-t", String(pid), "-n", "setpriv", `--reuid=${id.uid}`, `--regid=${id.gid}`, "--clear-groups", "--inh-caps=-all", process.execPath, "-e", code], {
      encoding: "utf8", timeout: 15_000, stdio: ["ignore", "pipe", "pipe", ...extraFds],
    });
  };

  test("an escaped QEMU holds no writable descriptor on a file another VM maps, and cannot reopen one for writing", async () => {
    const pid = sbx.pid!;
    // Every file another QEMU of this host maps (the pool's VMs map the same template RAM).
    const others = [...findInstanceProcesses(rt.instance, { pooled: true }).values()].filter((p) => p !== pid);
    assert.ok(others.length > 0, "another VM runs (the pool's)");
    const mappedElsewhere = new Set<string>();
    for (const p of others) {
      for (const line of readFileSync(`/proc/${p}/maps`, "utf8").split("\n")) {
        const path = line.split(/\s+/)[5];
        if (path?.startsWith("/")) mappedElsewhere.add(path);
      }
    }
    const ram = join((await rt.templates.resolve("base")).dir, "memory.bin");
    assert.ok(mappedElsewhere.has(ram), "the template's RAM file is mapped by another VM");
    let ramFd: string | undefined;
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      if (!mappedElsewhere.has(target)) continue;
      const flags = Number.parseInt(/^flags:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/fdinfo/${fd}`, "utf8"))![1]!, 8);
      assert.equal(flags & 3, 0, `fd ${fd} on ${target} is read-only (flags ${flags.toString(8)})`);
      if (target === ram) ramFd = fd;
    }
    assert.ok(ramFd, "QEMU holds the template's RAM file (read-only)");
    // With its uid, that descriptor cannot be made a writable one (the file is root's).
    const held = openSync(ram, "r");
    try {
      const r = asEscapedQemu(pid, `const fs = require("fs"); for (const how of ["r+", "a"]) { try { fs.openSync("/proc/self/fd/3", how); console.log("opened " + how); } catch (e) { console.log(e.code); } } try { fs.ftruncateSync(3, 0); console.log("truncated"); } catch (e) { console.log(e.code); }`, [held]);
      assert.equal(r.status, 0, r.stderr);
      assert.deepEqual(r.stdout.trim().split("\n"), ["EACCES", "EACCES", "EINVAL"]);
    } finally {
      closeSync(held);
    }
  });

  test("an escaped QEMU reaches no network address: not 127.0.0.1, not the host's, not the host's abstract unix sockets", async () => {
    const pid = sbx.pid!;
    // Listeners on the host that a QEMU in the host's namespace would reach.
    const tcp = net.createServer((c) => c.end("reached"));
    await new Promise<void>((r) => tcp.listen(0, "0.0.0.0", r));
    const port = (tcp.address() as net.AddressInfo).port;
    const abstract = `\0den-jail-test-${process.pid}`;
    const unix = net.createServer((c) => c.end("reached"));
    await new Promise<void>((r) => unix.listen(abstract, r));
    const hostAddress = Object.values(networkInterfaces()).flat().find((a) => a && a.family === "IPv4" && !a.internal)?.address;
    try {
      const targets = [["127.0.0.1", port], ...(hostAddress ? [[hostAddress, port]] : []), ["169.254.169.254", 80]];
      // (From here, the same connections do reach the two listeners: the test can fail.)
      const code = `const net = require("net"); const targets = ${JSON.stringify(targets)};
        const one = (opts) => new Promise((r) => { const s = net.connect(opts); s.setTimeout(3000, () => { s.destroy(); r("timeout"); }); s.on("connect", () => { s.destroy(); r("connected"); }); s.on("error", (e) => r(e.code)); });
        (async () => { const out = []; for (const [host, port] of targets) out.push(host + " " + await one({ host, port })); out.push("abstract " + await one({ path: ${JSON.stringify(abstract)} })); console.log(out.join("\\n")); })();`;
      const r = asEscapedQemu(pid, code);
      assert.equal(r.status, 0, r.stderr);
      const lines = r.stdout.trim().split("\n");
      assert.equal(lines.length, targets.length + 1, r.stdout);
      for (const line of lines) assert.doesNotMatch(line, /connected|timeout/, `${line} (expected a refusal at once)`);
      assert.match(lines.at(-1)!, /^abstract (ECONNREFUSED|ENOENT)$/);
    } finally {
      tcp.close();
      unix.close();
    }
  });

  test("a symlink planted in a jail makes no chown of its target: jails are root's, and an older Den's jail is taken back", async () => {
    const pid = sbx.pid!;
    const jail = join(sbx.dir, "jail");
    const router = join(sbx.dir, "router-jail");
    for (const dir of [jail, router]) {
      const st = statSync(dir);
      assert.deepEqual([st.uid, st.gid, st.mode & 0o7777], [0, 0, 0o711], `${dir} is root's, 0711`);
    }
    // As its uid, QEMU can plant nothing there.
    const plant = asEscapedQemu(pid, `try { require("fs").symlinkSync("/etc/hostname", ${JSON.stringify(join(jail, "migrate-out.sock"))}); console.log("planted"); } catch (e) { console.log(e.code); }`);
    assert.equal(plant.stdout.trim(), "EACCES");
    // A jail an older Den gave the VM's uid, with a link where the migration socket goes:
    // a snapshot takes the jail back and chowns no link's target.
    const id = vmIdentity(rt.instance, processTags(pid)!.vm);
    const target = join(mkdtempSync(join(tmpdir(), "den-plant-")), "target");
    writeFileSync(target, "root's file\n");
    chownSync(jail, id.uid, id.gid);
    symlinkSync(target, join(jail, "migrate-out.sock"));
    lchownSync(join(jail, "migrate-out.sock"), id.uid, id.gid);
    const snap = await rt.snapshot(sbx.id);
    try {
      const st = statSync(target);
      assert.deepEqual([st.uid, st.gid], [0, 0], "the link's target is still root's");
      assert.equal(readFileSync(target, "utf8"), "root's file\n");
      assert.equal(statSync(jail).uid, 0, "the jail is root's again");
      assert.equal((await sbx.exec("echo alive")).stdout.toString(), "alive\n");
    } finally {
      await rt.deleteSnapshot(snap.id);
      rmSync(dirname(target), { recursive: true, force: true });
    }
  });

  test("a QMP migrate to exec: spawns nothing (seccomp: QEMU may not fork)", async () => {
    const pid = sbx.pid!;
    const qmp = (sbx as unknown as { core: { vm: { qmp: { execute(c: string, a?: unknown): Promise<unknown> } } } }).core.vm.qmp;
    // QEMU 10's filter answers a fork with EPERM (7.2's killed the process): either way no child runs.
    const answer = await qmp.execute("migrate", { uri: "exec:cat > /dev/null" }).then(() => "started", (e: Error) => e.message);
    const children = () => readdirSync(`/proc/${pid}/task`).map((t) => readFileSync(`/proc/${pid}/task/${t}/children`, "utf8").trim()).join("");
    if (/Failed to fork \(Operation not permitted\)/.test(answer)) {
      assert.equal(children(), "", "QEMU has no child process");
    } else {
      const deadline = Date.now() + 10_000;
      while (!hasExited(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      assert.ok(hasExited(pid), `QEMU was neither refused its fork nor killed at it (migrate: ${answer})`);
    }
  });
});
