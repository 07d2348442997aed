// needs: memory host, no database
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError, inventoryCpuSeconds, type HostGuest } from "@den/protocol";
import { LocalDirStore, storedSnapshotComplete } from "@den/store";
import { newId } from "@den/runtime";
import { ManualClock, MemoryHostAgent } from "../src/index.js";

const sbx = () => newId("sbx");
const op = () => newId("op");
const snap = () => newId("snap");
const ref = (id = snap()) => ({ id, key: `test/snapshots/${id}` });

/** Rejects with a DenError of `code`. */
async function rejects(p: Promise<unknown>, code: string, message?: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof DenError, `not a DenError: ${String(e)}`);
    assert.equal(e.code, code, e.message);
    if (message) assert.match(e.message, message);
    return true;
  });
}

async function running(host: MemoryHostAgent, id = sbx()): Promise<{ id: string; g: HostGuest }> {
  await host.vms.create(op(), { id, template: "base" });
  return { id, g: host.guest(id) };
}

const sh = async (g: HostGuest, cmd: string, opts = {}) => {
  const r = await g.exec(cmd, opts);
  return { out: r.stdout.toString(), err: r.stderr.toString(), code: r.exitCode, timedOut: r.timedOut };
};

test("the mini shell: builtins, quotes, variables, redirections, && || | ; and its errors", async () => {
  const host = await MemoryHostAgent.open();
  const { g } = await running(host);
  assert.deepEqual(await sh(g, "echo hi > /a; cat /a"), { out: "hi\n", err: "", code: 0, timedOut: false });
  assert.equal((await sh(g, `echo -n "a  b" 'c $X' $X \${X}!`, { env: { X: "x" } })).out, "a  b c $X x x!");
  assert.equal((await sh(g, "printf '%s-%s\\n' a b >> /a; cat /a")).out, "hi\na-b\n");
  assert.equal((await sh(g, "false && echo no || echo yes; true && echo also")).out, "yes\nalso\n");
  assert.equal((await sh(g, "mkdir -p /w/x && cd /w/x && pwd && touch f && ls && test -f f && [ -d /w ] && echo ok")).out, "/w/x\nf\nok\n");
  assert.equal((await sh(g, "echo abc | cat | head -c 2")).out, "ab");
  assert.equal((await sh(g, "cat", { stdin: "from stdin" })).out, "from stdin");
  assert.equal((await sh(g, "cat < /a")).out, "hi\na-b\n");
  assert.equal((await sh(g, "sh -c 'echo inner; exit 3'")).code, 3);
  assert.equal((await sh(g, "bash -c \"echo $HOME\"")).out, "/root\n");
  assert.equal((await sh(g, "pwd", { user: "user" })).out, "/home/user\n");
  assert.deepEqual(await sh(g, "nope arg"), { out: "", err: "sh: nope: not found\n", code: 127, timedOut: false });
  assert.deepEqual(await sh(g, "cat /missing"), { out: "", err: "cat: /missing: No such file or directory\n", code: 1, timedOut: false });
  assert.equal((await sh(g, "mkdir /w")).err, "mkdir: cannot create directory '/w': File exists\n");
  assert.equal((await sh(g, "rm /w")).err, "rm: cannot remove '/w': Is a directory\n");
  assert.equal((await sh(g, "rm -rf /w /none; test -e /w")).code, 1);
  assert.equal((await sh(g, "echo oops >&2 2>/dev/null")).err, "oops\n");
  assert.equal((await sh(g, "exit 7; echo never")).code, 7);
  // What the control plane runs in a volume's helper VM.
  assert.equal((await g.exec(["chown", "-h", "1000:1000", "--", "/a"])).exitCode, 0);
  assert.equal((await g.exec(["chmod", "600", "--", "/a"])).exitCode, 0);
  const st = await g.files.stat("/a");
  assert.deepEqual([st.uid, st.gid, st.mode], [1000, 1000, 0o600]);
  // argv runs a program directly: an unknown one is the agent's not_found.
  assert.equal((await g.exec(["/bin/echo", "a b"])).stdout.toString(), "a b\n");
  await rejects(g.exec(["python3", "-V"]), "not_found", /python3: No such file/);
  // The runtime's own checks, and the guest agent's.
  await rejects(g.exec("pwd", { cwd: "/none" }), "cwd_not_found");
  await rejects(g.exec("pwd", { user: "nobody" }), "invalid_argument", /no user "nobody"/);
  await rejects(g.exec(""), "invalid_argument");
  host.close();
});

test("the mini shell: $!, kill, mv, sync, nohup, set -e, $? and $(...)", async () => {
  const host = await MemoryHostAgent.open();
  const { g } = await running(host);
  // A job in the background: its pid in $!, the files it redirects to made.
  const bg = await sh(g, "nohup sleep 1000 > /root/log 2>&1 & echo $! > /root/bg.pid; sync; cat /root/bg.pid");
  const pid = Number(bg.out);
  assert.ok(Number.isInteger(pid) && pid > 0, bg.out);
  assert.deepEqual((await g.processes.list()).filter((p) => p.running).map((p) => [p.pid, p.cmd]), [[pid, "nohup sleep 1000"]]);
  assert.equal((await sh(g, "test -f /root/log && echo made")).out, "made\n");
  assert.equal((await sh(g, "echo [$!]")).out, "[]\n", "a new exec has no job of its own");
  // kill -0: is it there; kill -TERM: it ends; kill -0 again: exit 1 and a message.
  assert.deepEqual(await sh(g, "kill -0 $(cat /root/bg.pid) && echo alive"), { out: "alive\n", err: "", code: 0, timedOut: false });
  assert.equal((await sh(g, "kill -TERM $(cat /root/bg.pid)")).code, 0);
  assert.deepEqual(await sh(g, `kill -0 ${pid}`), { out: "", err: `sh: kill: (${pid}) - No such process\n`, code: 1, timedOut: false });
  assert.equal((await sh(g, "kill 99999")).code, 1);
  assert.deepEqual(await sh(g, "kill -FOO 1"), { out: "", err: "sh: kill: FOO: invalid signal specification\n", code: 1, timedOut: false });
  const spawned = await g.spawn("sleep 30");
  assert.equal((await sh(g, `kill -9 ${spawned.pid}`)).code, 0);
  assert.deepEqual(await g.processes.wait(spawned.proc), { running: false, exit_code: null, signal: 9, timed_out: false });
  // nohup runs its command.
  assert.equal((await sh(g, "nohup echo hung up")).out, "hung up\n");
  // mv: a rename, into a directory, and its errors.
  assert.equal((await sh(g, "echo m > /root/m1; mkdir -p /root/d; mv /root/m1 /root/m2 && mv /root/m2 /root/d && cat /root/d/m2; test -e /root/m2 || echo moved")).out, "m\nmoved\n");
  assert.deepEqual(await sh(g, "mv /nope /root/x"), { out: "", err: "mv: cannot stat '/nope': No such file or directory\n", code: 1, timedOut: false });
  assert.equal((await sh(g, "mv /root/log")).code, 1);
  // $(...): run when its command runs, trailing newlines dropped, split unless quoted.
  assert.equal((await sh(g, `echo "[$(printf 'a  b')]" [$(printf 'a  b')] $(printf 'x\\ny\\n') $(true) end`)).out, "[a  b] [a b] x y end\n");
  assert.equal((await sh(g, "sh -c 'exit 3'; echo $?")).out, "3\n");
  assert.equal((await sh(g, "echo $(cat /root/d/m2)$(echo n)")).out, "mn\n");
  // set -e: a failing command ends the script, unless && or || tests it.
  assert.deepEqual(await sh(g, "set -e; echo one; false; echo two"), { out: "one\n", err: "", code: 1, timedOut: false });
  assert.deepEqual(await sh(g, "set -e; false || echo handled; false && echo no; echo after"), { out: "handled\nafter\n", err: "", code: 0, timedOut: false });
  assert.equal((await sh(g, "set -e; set +e; false; echo on")).out, "on\n");
  host.close();
});

test("sleep waits real time, bounded by the exec's timeout; output is capped as the runtime caps it", async () => {
  const host = await MemoryHostAgent.open();
  const { g } = await running(host);
  const t0 = Date.now();
  const r = await g.exec("echo before; sleep 5; echo after", { timeoutMs: 150 });
  assert.ok(Date.now() - t0 < 2000);
  assert.deepEqual({ out: r.stdout.toString(), code: r.exitCode, signal: r.signal, timedOut: r.timedOut }, { out: "before\n", code: null, signal: 9, timedOut: true });
  assert.equal((await sh(g, "sleep 0.05 && echo slept")).out, "slept\n");
  await g.files.write("/big", Buffer.alloc(100_000, 97));
  await rejects(g.exec("cat /big", { maxOutputBytes: 1000 }), "payload_too_large");
  host.close();
});

test("files: streams, offsets, owners, and the guest agent's error codes", async () => {
  const host = await MemoryHostAgent.open();
  const { g } = await running(host);
  async function* chunks() {
    yield Buffer.from("hello ");
    yield Buffer.from("world");
  }
  assert.equal(await g.files.write("/d/e/f.txt", chunks(), { mode: 0o600, user: "user" }), 11);
  const st = await g.files.stat("/d/e/f.txt");
  assert.deepEqual([st.type, st.size, st.mode, st.uid, st.gid], ["file", 11, 0o600, 1000, 1000]);
  const parts: Buffer[] = [];
  for await (const c of g.files.readStream("/d/e/f.txt", { offset: 6, length: 3 })) parts.push(c);
  assert.equal(Buffer.concat(parts).toString(), "wor");
  assert.deepEqual((await g.files.list("/d/e")).entries.map((e) => e.name), ["f.txt"]);
  await g.files.setXattrs("/d/e/f.txt", { "user.k": "v" });
  assert.deepEqual(await g.files.getXattrs("/d/e/f.txt"), { "user.k": "v" });
  await rejects(g.files.setXattrs("/d/e/f.txt", { "trusted.k": "v" }), "invalid_argument");
  await g.files.rename("/d/e/f.txt", "/d/g.txt");
  await rejects(g.files.stat("/d/e/f.txt"), "file_not_found", /\/d\/e\/f.txt: No such file or directory/);
  await rejects((async () => { for await (const _ of g.files.readStream("/nope")) void _; })(), "file_not_found");
  await rejects((async () => { for await (const _ of g.files.readStream("/d")) void _; })(), "is_a_directory");
  await rejects(g.files.list("/d/g.txt"), "not_a_directory");
  await rejects(g.files.mkdir("/d", { parents: false }), "already_exists");
  await rejects(g.files.remove("/d"), "not_empty");
  await rejects(g.files.remove("/"), "invalid_argument");
  await rejects(g.files.write("/x/y", "z", { parents: false }), "file_not_found");
  await rejects(g.files.write("/d", "z"), "is_a_directory");
  await g.files.remove("/d", { recursive: true });
  await rejects(g.files.stat("/d"), "file_not_found");
  host.close();
});

test("streamed execs: an interactive cat echoes its stdin; spawned processes keep ring buffers", async () => {
  const host = await MemoryHostAgent.open();
  const { g } = await running(host);
  const p = await g.execStream("cat", { interactive: true });
  const it = p[Symbol.asyncIterator]();
  await p.write("ping\n");
  assert.equal((await it.next()).value.data.toString(), "ping\n");
  p.closeStdin();
  assert.equal((await it.next()).done, true);
  assert.deepEqual(await p.wait(), { exitCode: 0, signal: null, timedOut: false });

  const { proc } = await g.spawn("echo 0123456789; sleep 30", { bufferBytes: 4 });
  await new Promise((r) => setTimeout(r, 20));
  const read = await g.processes.read(proc, "stdout", 0);
  assert.deepEqual([Buffer.from(read.data, "base64").toString(), read.offset, read.dropped, read.eof], ["789\n", 7, true, false]);
  assert.deepEqual(await g.processes.wait(proc, 10), { running: true });
  await g.processes.signal(proc, 15);
  assert.deepEqual(await g.processes.wait(proc), { running: false, exit_code: null, signal: 15, timed_out: false });
  await rejects(g.processes.read(999, "stdout"), "proc_not_found");
  const s = await g.spawn("cat", { interactive: true });
  await g.processes.write(s.proc, "in", true);
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(Buffer.from((await g.processes.read(s.proc, "stdout")).data, "base64").toString(), "in");
  host.close();
});

test("lifecycle: warm, cold (through the store, onto another host), disk; processes survive what a VM's memory survives", async () => {
  const dir = mkdtempSync(join(tmpdir(), "den-memory-store-"));
  const store = new LocalDirStore(dir);
  const a = await MemoryHostAgent.open({ store });
  const b = await MemoryHostAgent.open({ store });
  const { id, g } = await running(a);
  await sh(g, "echo kept > /a; sleep 1000 &");
  const procs = async (h: MemoryHostAgent) => (await h.guest(id).processes.list()).filter((p) => p.running).map((p) => p.cmd);
  assert.deepEqual(await procs(a), ["sleep 1000"]);

  const warm = snap();
  await a.vms.hibernateWarm(op(), id, warm);
  await rejects(g.exec("true"), "sandbox_not_running", /is paused/);
  assert.equal((await a.inventory()).vms[0]!.state, "paused");
  await a.vms.wakeWarm(op(), id, warm);
  assert.deepEqual(await procs(a), ["sleep 1000"]);

  // Cold: uploaded by one host, the VM destroyed, restored by another host sharing the store.
  const to = ref();
  const upload = op();
  const up = await a.vms.upload(upload, id, to);
  assert.ok(up.storedBytes > 0 && (await storedSnapshotComplete(store, to.key)));
  assert.deepEqual(await a.vms.upload(upload, id, to), up, "the same op again: the first answer");
  await a.vms.destroy(id);
  await rejects(g.exec("true"), "sandbox_not_found");
  await b.vms.restore(op(), id, to);
  assert.equal((await sh(b.guest(id), "cat /a")).out, "kept\n");
  assert.deepEqual(await procs(b), ["sleep 1000"]);

  // Disk: files stay, processes are gone (a fresh boot).
  await b.vms.hibernateDisk(op(), id);
  assert.equal((await b.inventory()).vms[0]!.state, "off");
  assert.equal(inventoryCpuSeconds(await b.inventory(), id), undefined);
  await rejects(b.guest(id).exec("true"), "sandbox_not_running", /shut down/);
  await b.vms.wakeDisk(op(), id);
  assert.equal((await sh(b.guest(id), "cat /a")).out, "kept\n");
  assert.deepEqual(await procs(b), []);
  a.close();
  b.close();
  rmSync(dir, { recursive: true, force: true });
});

test("fork copies files and processes; checkpoint and restore; idempotency by operation id", async () => {
  const host = await MemoryHostAgent.open();
  const { id, g } = await running(host);
  await sh(g, "echo parent > /p; sleep 100 &");
  const [k1, k2] = [sbx(), sbx()];
  const fork = op();
  const kids = await host.vms.fork(fork, id, [k1, k2]);
  assert.equal(kids.length, 2);
  assert.deepEqual(await host.vms.fork(fork, id, [k1, k2]), kids);
  await sh(host.guest(k1), "echo child > /p");
  assert.equal((await sh(g, "cat /p")).out, "parent\n");
  assert.equal((await sh(host.guest(k2), "cat /p")).out, "parent\n");
  assert.equal((await host.guest(k2).processes.list()).filter((p) => p.running).length, 1);
  await rejects(host.vms.fork(op(), id, [k1]), "already_exists");

  const cp = ref();
  const made = await host.vms.checkpoint(op(), id, cp);
  assert.ok(made.storedBytes > 0);
  await sh(g, "echo later > /p");
  const back = sbx();
  await host.vms.restore(op(), back, cp);
  assert.equal((await sh(host.guest(back), "cat /p")).out, "parent\n");
  await rejects(host.vms.restore(op(), sbx(), ref()), "snapshot_not_found");
  host.close();
});

test("faults: failures by call, hangs, failures and deaths at named steps", async () => {
  const host = await MemoryHostAgent.open();
  const { id, g } = await running(host);
  host.faults.fail("exec", new DenError("io_error", "injected"));
  await rejects(g.exec("true"), "io_error");
  assert.equal((await sh(g, "true")).code, 0, "once by default");

  host.faults.fail("upload");
  const upload = op();
  await rejects(host.vms.upload(upload, id, ref()), "internal");
  // A failed operation may be asked again with the same id.
  const to = ref();
  await host.vms.upload(upload, id, to);

  await host.vms.wakeWarm(op(), id, null);
  const release = host.faults.hang("checkpoint");
  let settled = false;
  const cp = host.vms.checkpoint(op(), id, ref()).finally(() => (settled = true));
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(settled, false);
  release();
  await cp;

  // At the real host's step between the snapshot and the store: the VM runs again.
  host.faults.failAt("hibernate-cold-after-snapshot");
  await rejects(host.vms.upload(op(), id, ref()), "internal");
  assert.equal(host.sandbox(id)!.state, "running");

  host.faults.dieAt("snapshot-upload-mid");
  await rejects(host.vms.checkpoint(op(), id, ref()), "agent_unavailable", /unreachable/);
  await rejects(host.inventory(), "agent_unavailable", /unreachable/);
  await rejects(host.guest(id).exec("true"), "agent_unavailable");
  host.revive();
  assert.deepEqual((await host.inventory()).vms, [], "a lost machine's VMs are gone");
  assert.deepEqual(host.calls.slice(-2).map((c) => c.name), ["checkpoint", "inventory"]);
  host.close();
});

test("restart forgets the journal and cuts calls in flight; killVm; admission under memory pressure", async () => {
  const host = await MemoryHostAgent.open({ capacity: { memoryMb: 1024, vcpus: 4, diskReserveMb: 0, memoryReserveMb: 256 } });
  const { id } = await running(host);
  const release = host.faults.hang("hibernateWarm");
  const warmOp = op();
  const hung = host.vms.hibernateWarm(warmOp, id, snap());
  host.restart();
  await rejects(hung, "agent_unavailable", /restarted/);
  release();
  await host.settled(warmOp);
  assert.equal(host.sandbox(id)!.state, "paused");

  host.killVm(id);
  assert.equal((await host.inventory()).vms[0]!.state, "stopped");
  await rejects(host.guest(id).exec("true"), "agent_unavailable");
  await rejects(host.vms.wakeWarm(op(), id, null), "sandbox_not_running", /no VM and no snapshot/);
  await host.vms.destroy(id);

  await running(host);
  await rejects(host.vms.checkShape({ vcpus: 1, memoryMb: 1024 }), "capacity_exhausted");
  host.setAvailableMemoryMb(100);
  assert.deepEqual((await host.inventory()).capacity.memory, { availableMb: 100, reserveMb: 256 });
  await rejects(host.vms.create(op(), { id: sbx(), template: "base" }), "capacity_exhausted", /short of memory/);
  host.setAvailableMemoryMb(undefined);
  await host.vms.create(op(), { id: sbx(), template: "base" });
  host.close();
});

test("scripts, tunnels to a test's listener, CPU seconds on a manual clock", async () => {
  const clock = new ManualClock();
  const host = await MemoryHostAgent.open({ clock });
  const { id, g } = await running(host);
  host.script("npm install", { stdout: "added 1 package\n" });
  host.script(/^python3 /, (cmd) => (cmd.includes("fail") ? { stderr: "boom\n", exitCode: 1 } : undefined));
  assert.equal((await sh(g, "cd /app 2>/dev/null; npm install")).out, "added 1 package\n");
  assert.deepEqual(await sh(g, "python3 fail.py"), { out: "", err: "boom\n", code: 1, timedOut: false });
  assert.equal((await sh(g, "python3 ok.py")).code, 127, "undefined: the mini shell runs it");

  await rejects(g.tunnel(8080), "connection_refused");
  host.listen(id, 8080, (socket) => socket.on("data", (d: Buffer) => socket.end(`echo:${d}`)));
  assert.deepEqual(await g.listeningPorts(), [{ port: 8080, address: "127.0.0.1", family: 4 }]);
  const t = await g.tunnel(8080);
  t.end("hi");
  const [reply] = (await once(t, "data")) as [Buffer];
  assert.equal(reply.toString(), "echo:hi");

  assert.equal(inventoryCpuSeconds(await host.inventory(), id), 0);
  host.setCpuLoad(id, 0.5);
  clock.advance(10_000);
  assert.equal(inventoryCpuSeconds(await host.inventory(), id), 5);
  assert.equal((await g.metrics()).timestampMs, clock.now());
  host.close();
});

test("templates: build (setup_failed as the real host words it), reuse, variants, delete; volumes", async () => {
  const host = await MemoryHostAgent.open();
  const built = await host.templates.build(op(), { name: "py", setup: ["mkdir -p /app", "echo v1 > /app/v"], setupTimeoutSeconds: 10 });
  assert.deepEqual([built.name, built.current, built.reused, built.memory_mb], ["py", true, false, 512]);
  assert.equal((await host.templates.build(op(), { name: "py", setup: ["mkdir -p /app", "echo v1 > /app/v"], setupTimeoutSeconds: 10 })).reused, true);
  await rejects(host.templates.build(op(), { name: "bad", setup: ["true", "echo out; exit 4"], setupTimeoutSeconds: 10 }), "setup_failed", /setup command 2 exited with 4/);
  await running(host);
  const id = sbx();
  const info = await host.vms.create(op(), { id, template: "py", memoryMb: 1024 });
  assert.deepEqual([info.template, info.memoryMb], ["py", 1024]);
  assert.equal((await sh(host.guest(id), "cat /app/v")).out, "v1\n");
  assert.ok((await host.templates.list()).some((t) => t.name === "py.1c1024m"));
  await host.templates.delete("py");
  await rejects(host.vms.create(op(), { id: sbx(), template: "py" }), "template_not_found");
  await rejects(host.vms.create(op(), { id: sbx(), template: "base@0123456789ab" }), "template_not_found");

  const vol = `vol_${"a".repeat(16)}`;
  await host.volumes.create(op(), vol, 64);
  const mounted = sbx();
  await host.vms.create(op(), { id: mounted, template: "base", volumes: [{ volume: vol, path: "/data", readOnly: false }] });
  await sh(host.guest(mounted), "echo on-volume > /data/f");
  assert.equal(host.volume(vol)!.read("/f").toString(), "on-volume\n");
  const [image] = await host.volumes.images();
  assert.equal(await host.volumes.dropImage(vol, image!.inode), false, "in a slot");
  await rejects(host.volumes.park(op(), vol, ref()), "volume_in_use");
  await host.vms.destroy(mounted);
  const parked = ref();
  await host.volumes.park(op(), vol, parked);
  await host.volumes.fetch(op(), vol, parked);
  assert.notEqual((await host.volumes.images())[0]!.inode, image!.inode, "a fetch makes a new image");
  assert.equal(await host.volumes.dropImage(vol, image!.inode), false, "not the image listed");
  await rejects(host.vms.create(op(), { id: sbx(), template: "base", volumes: [{ volume: `vol_${"b".repeat(16)}`, path: "/v", readOnly: true }] }), "volume_not_found");
  host.close();
});

/** What a host shows of itself: its inventory, templates, volume images, and each sandbox's files and processes. */
async function portrait(h: MemoryHostAgent) {
  const boxes = await Promise.all(h.sandboxes().map(async (s) => ({
    id: s.id, state: s.state, template: s.template, shape: s.shape, volumes: s.volumes, network: s.network,
    // (A streamed exec is its caller's: a new process of the host does not have it.)
    processes: s.processes.filter((p) => p.mode === "buffer"), files: s.fs.list("/root").entries.map((e) => [e.name, e.type === "file" ? s.fs.read(`/root/${e.name}`).toString() : "dir"]),
  })));
  return { inventory: await h.inventory(), templates: await h.templates.list(), volumes: await h.volumes.images(), boxes };
}

test("persistence: a second open on the data dir (as after a kill -9) finds the VMs, files, processes, snapshots, templates and volumes", async () => {
  const dir = mkdtempSync(join(tmpdir(), "den-memory-persist-"));
  const clock = new ManualClock();
  const a = await MemoryHostAgent.open({ dataDir: dir, clock });
  const built = await a.templates.build(op(), { name: "py", setup: ["mkdir -p /app", "echo v1 > /app/v"], setupTimeoutSeconds: 10 });
  const vol = `vol_${"c".repeat(16)}`;
  await a.volumes.create(op(), vol, 64);

  // Running, with a volume in a slot, files, a background job (its pid in a file), a spawned process's output, a network.
  const run = sbx();
  await a.vms.create(op(), { id: run, template: "py", volumes: [{ volume: vol, path: "/data", readOnly: false }], network: { egress: "open" } });
  const gr = a.guest(run);
  await sh(gr, "echo kept > /root/a; echo on-volume > /data/f; sleep 1000 & echo $! > /root/bg.pid");
  const spawned = await gr.spawn("echo spawned-output; cat", { interactive: true });
  await new Promise((r) => setTimeout(r, 20));
  a.setCpuLoad(run, 0.5);
  clock.advance(4000);
  a.refuse(run, "policy", 2);
  // An exec still running (a streamed one) is its caller's: it is not kept.
  const inFlight = await gr.execStream("cat", { interactive: true });
  // Warm: paused, its local snapshot kept.
  const warm = sbx();
  const warmSnap = snap();
  await a.vms.create(op(), { id: warm, template: "base" });
  await sh(a.guest(warm), "echo warm > /root/w; sleep 500 &");
  await a.vms.hibernateWarm(op(), warm, warmSnap);
  // Cold, the first half done: the stored copy is complete, the VM paused until the control plane destroys it.
  const cold = sbx();
  const coldRef = ref();
  await a.vms.create(op(), { id: cold, template: "base" });
  await sh(a.guest(cold), "echo cold > /root/c");
  await a.vms.upload(op(), cold, coldRef);
  // Disk: off, its files kept.
  const disk = sbx();
  await a.vms.create(op(), { id: disk, template: "base" });
  await sh(a.guest(disk), "echo disk > /root/d; sleep 100 &");
  await a.vms.hibernateDisk(op(), disk);
  // A VM that died stays dead.
  const dead = sbx();
  await a.vms.create(op(), { id: dead, template: "base" });
  a.killVm(dead);
  const before = await portrait(a);

  // Read without opening it, then opened again: the first host is not closed (its process was killed).
  const saved = MemoryHostAgent.readState(dir)!;
  assert.equal(saved.instance, a.instance);
  assert.deepEqual(new Map(saved.vms.map((v) => [v.id, v.state])), new Map([[run, "running"], [warm, "paused"], [cold, "paused"], [disk, "off"], [dead, "stopped"]]));
  assert.deepEqual(saved.snapshots, [warmSnap]);
  assert.deepEqual(saved.pins, { [coldRef.id]: `base@${(await a.templates.list()).find((t) => t.name === "base")!.version}` });
  assert.deepEqual(saved.volumes, [vol]);
  assert.ok(saved.templates.includes(`py@${built.version}`));
  const b = await MemoryHostAgent.open({ dataDir: dir, clock });
  a.close();
  assert.equal(b.instance, a.instance);
  assert.deepEqual(await portrait(b), before);
  assert.equal((inventoryCpuSeconds(await b.inventory(), run))!, 2);
  assert.deepEqual(await b.vms.networkRefusals(run), { private: 0, policy: 2, limit: 0, dns: 0 });
  assert.ok(!(await b.guest(run).processes.list()).some((p) => p.proc === inFlight.proc), "the exec in flight is gone");

  // It goes on as the same host would: the job is there, the spawned process has its output, the volume is shared.
  const gb = b.guest(run);
  assert.equal((await sh(gb, "kill -0 $(cat /root/bg.pid) && cat /root/a /data/f")).out, "kept\non-volume\n");
  assert.equal(Buffer.from((await gb.processes.read(spawned.proc, "stdout")).data, "base64").toString(), "spawned-output\n");
  assert.equal(b.volume(vol)!.read("/f").toString(), "on-volume\n");
  assert.equal(await b.volumes.dropImage(vol, before.volumes[0]!.inode), false, "in a slot, same inode");
  await b.vms.wakeWarm(op(), warm, warmSnap);
  assert.deepEqual((await sh(b.guest(warm), "cat /root/w")).out, "warm\n");
  assert.deepEqual(b.sandbox(warm)!.processes.map((p) => p.cmd), ["sleep 500"]);
  assert.ok(await storedSnapshotComplete(b.store, coldRef.key));
  await b.vms.destroy(cold);
  await b.vms.wakeDisk(op(), disk);
  assert.equal((await sh(b.guest(disk), "cat /root/d")).out, "disk\n");
  assert.deepEqual(b.sandbox(disk)!.processes, [], "a disk wake is a fresh boot");
  await b.vms.restore(op(), sbx(), coldRef);
  // Each change is written: a third open sees what the second did.
  await sh(gb, "echo later >> /root/a");
  const seen = await portrait(b);
  const c = await MemoryHostAgent.open({ dataDir: dir, clock });
  b.close();
  assert.deepEqual(await portrait(c), seen);
  assert.equal(c.sandbox(run)!.fs.read("/root/a").toString(), "kept\nlater\n");
  assert.equal(c.sandbox(cold), undefined);
  assert.equal(c.sandbox(disk)!.state, "running");
  assert.deepEqual(MemoryHostAgent.readState(dir)!.vms.map((v) => v.id).sort(), c.sandboxes().map((s) => s.id).sort());

  // Bounded: a file that would take the state past 64 MiB is refused before it is written.
  await rejects(c.guest(run).files.write("/root/big", Buffer.alloc(50 * 1024 * 1024)), "disk_full", /at most 64\.0 MiB of state/);
  assert.equal(c.sandbox(run)!.fs.find("/root/big"), undefined);
  c.close();
  rmSync(dir, { recursive: true, force: true });
  // No data dir: nothing is kept.
  const t = await MemoryHostAgent.open();
  assert.equal(MemoryHostAgent.readState(join(tmpdir(), "den-no-such-dir")), undefined);
  t.close();
});

test("persistence through a real kill: a host killed at hibernate-cold-after-snapshot leaves its VM paused, nothing stored", async () => {
  const dir = mkdtempSync(join(tmpdir(), "den-memory-kill-"));
  const id = sbx();
  const to = ref();
  const marker = join(dir, "fault-marker");
  const script = join(dir, "child.mjs");
  writeFileSync(script, `
    const { MemoryHostAgent } = await import(${JSON.stringify(new URL("../src/index.js", import.meta.url).href)});
    const [dataDir, id, to] = process.argv.slice(2);
    const host = await MemoryHostAgent.open({ dataDir });
    await host.vms.create(${JSON.stringify(op())}, { id, template: "base" });
    await host.guest(id).exec("echo before-the-kill > /root/a; sleep 1000 & echo $! > /root/bg.pid");
    await host.vms.upload(${JSON.stringify(op())}, id, JSON.parse(to));
    console.log("not killed");
  `);
  const child = spawnSync(process.execPath, [script, dir, id, JSON.stringify(to)], {
    env: { ...process.env, DEN_FAULT_POINT: "hibernate-cold-after-snapshot", DEN_FAULT_MARKER: marker }, encoding: "utf8", timeout: 30_000,
  });
  assert.equal(child.signal, "SIGKILL", `the child was not killed: ${child.status} ${child.stdout} ${child.stderr}`);
  assert.equal(readFileSync(marker, "utf8"), "hibernate-cold-after-snapshot\n");

  // The VMs on the host: exactly the one, paused (read without opening the host).
  assert.deepEqual(MemoryHostAgent.readState(dir)!.vms, [{ id, state: "paused" }]);
  // (What a transfer cut short would have left: gone at the next open.)
  mkdirSync(join(dir, "transfers", "upload-cut-short"));
  const host = await MemoryHostAgent.open({ dataDir: dir });
  assert.deepEqual(readdirSync(join(dir, "transfers")), []);
  assert.equal(host.sandbox(id)!.state, "paused");
  assert.equal(await storedSnapshotComplete(host.store, to.key), false, "the upload had not begun");
  assert.deepEqual(MemoryHostAgent.readState(dir)!.pins, {}, "nor its pin");
  // What the control plane's recovery does with a half upload: the VM works on.
  await host.vms.resume(id);
  assert.equal((await sh(host.guest(id), "cat /root/a; kill -0 $(cat /root/bg.pid) && echo job-alive")).out, "before-the-kill\njob-alive\n");
  host.close();
  rmSync(dir, { recursive: true, force: true });
});
