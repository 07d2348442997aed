/**
 * Baselines with raw QEMU: the same operations driven by a bare QMP script with no Den
 * code, so the table can show the driver's overhead as a ratio.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { closeSync, mkdirSync, openSync, rmSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";
import { MICROVM_FIRMWARE, SLOT_BYTES, VOLUME_SLOTS } from "@den/runtime";

class RawQmp {
  private buf = "";
  private waiters: Array<(m: Record<string, unknown>) => void> = [];
  private constructor(private readonly sock: net.Socket) {
    sock.setEncoding("utf8");
    sock.on("data", (d: string) => {
      this.buf += d;
      let i: number;
      while ((i = this.buf.indexOf("\n")) >= 0) {
        const msg = JSON.parse(this.buf.slice(0, i)) as Record<string, unknown>;
        this.buf = this.buf.slice(i + 1);
        if (!("event" in msg)) this.waiters.shift()?.(msg);
      }
    });
    // QEMU gone (it crashes now and then in a restored VM's first cont): every waiter learns it.
    sock.on("close", () => {
      for (const w of this.waiters.splice(0)) w({ error: { class: "Closed", desc: "QEMU closed its QMP connection" } });
    });
    sock.on("error", () => undefined);
  }

  static async open(path: string): Promise<RawQmp> {
    for (;;) {
      const s = await new Promise<net.Socket | undefined>((res) => {
        const c = net.connect(path, () => res(c));
        c.on("error", () => res(undefined));
      });
      if (s) {
        const q = new RawQmp(s);
        await q.next(); // greeting
        await q.cmd("qmp_capabilities");
        return q;
      }
      await new Promise((r) => setTimeout(r, 2));
    }
  }

  private next(): Promise<Record<string, unknown>> {
    return new Promise((r) => this.waiters.push(r));
  }

  async cmd(execute: string, args?: object): Promise<Record<string, unknown>> {
    const p = this.next();
    this.sock.write(JSON.stringify(args ? { execute, arguments: args } : { execute }) + "\n");
    const m = await p;
    if (m.error) throw new Error(`${execute}: ${JSON.stringify(m.error)}`);
    return m.return as Record<string, unknown>;
  }

  close(): void {
    this.sock.destroy();
  }
}

export interface RawTemplate {
  dir: string;
  memoryMb: number;
  vcpus: number;
  cpu: string;
  accel: string;
}

export interface RawVm {
  proc: ChildProcess;
  qmp: RawQmp;
  dir: string;
}

function args(t: RawTemplate, dir: string, disk: string): string[] {
  return [
    "-M", "microvm,x-option-roms=off,rtc=on,memory-backend=ram", "-bios", MICROVM_FIRMWARE, "-accel", t.accel === "kvm" ? "kvm" : "tcg,tb-size=64",
    "-cpu", t.cpu, "-smp", String(t.vcpus), "-m", `${t.memoryMb}M`,
    "-object", `memory-backend-file,id=ram,size=${t.memoryMb}M,mem-path=${join(t.dir, "memory.bin")},share=off,readonly=on,rom=off`,
    "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
    "-drive", `id=root,if=none,format=qcow2,file=${disk}`, "-device", "virtio-blk-device,drive=root",
    "-device", "virtio-serial-device,max_ports=2",
    "-chardev", `socket,id=agent,path=${dir}/agent.sock,server=on,wait=off`, "-device", "virtserialport,chardev=agent,name=den.agent",
    "-chardev", `socket,id=console,path=${dir}/console.sock,server=on,wait=off`, "-serial", "chardev:console",
    "-netdev", `stream,id=net0,server=on,addr.type=unix,addr.path=${dir}/net.sock`, "-device", "virtio-net-device,netdev=net0,mac=52:54:00:de:4e:01",
    "-object", "rng-random,id=rng0,filename=/dev/urandom", "-device", "virtio-rng-device,rng=rng0",
    // The template was baked with its volume slots (empty): a restore needs the same devices.
    ...Array.from({ length: VOLUME_SLOTS }, (_, i) => [
      "-blockdev", `driver=null-co,node-name=vol${i},size=${SLOT_BYTES},read-zeroes=on`, "-device", `virtio-blk-device,drive=vol${i},serial=den-vol-${i}`,
    ]).flat(),
    "-qmp", `unix:${dir}/qmp.sock,server=on,wait=off`, "-incoming", "defer",
  ];
}

async function waitStatus(q: RawQmp, done: (s: string) => boolean): Promise<void> {
  for (;;) {
    const s = (await q.cmd("query-status")).status as string;
    if (done(s)) return;
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** Restores a template or snapshot (state file + disk to back an overlay) into a fresh QEMU, running. */
/**
 * A restore, as Den does it but with no Den code. QEMU 7.2 segfaults now and then in the first
 * `cont` (the runtime tries such a restore once more too): so does this, its time included.
 */
export async function rawRestore(t: RawTemplate, dir: string, state: string, backing: string): Promise<RawVm> {
  try {
    return await rawRestoreOnce(t, dir, state, backing);
  } catch {
    return rawRestoreOnce(t, dir, state, backing);
  }
}

async function rawRestoreOnce(t: RawTemplate, dir: string, state: string, backing: string): Promise<RawVm> {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const disk = join(dir, "disk.qcow2");
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", backing, disk]);
  // The state file is QEMU's descriptor 3 from the start (as Den hands it over): the floor has no copy in between.
  const fd = openSync(state, "r");
  const proc = spawn("qemu-system-x86_64", args(t, dir, disk), { stdio: ["ignore", "ignore", "ignore", fd] });
  closeSync(fd);
  try {
    const qmp = await RawQmp.open(join(dir, "qmp.sock"));
    await qmp.cmd("migrate-set-capabilities", { capabilities: [{ capability: "x-ignore-shared", state: true }] });
    await qmp.cmd("migrate-incoming", { uri: "fd:3" });
    await waitStatus(qmp, (s) => s !== "inmigrate");
    await qmp.cmd("cont");
    return { proc, qmp, dir };
  } catch (e) {
    proc.kill("SIGKILL");
    throw e;
  }
}

export async function rawSnapshot(vm: RawVm, stateFile: string): Promise<void> {
  await vm.qmp.cmd("stop");
  await vm.qmp.cmd("migrate-set-parameters", { "max-bandwidth": 64 * 1024 ** 3 });
  await vm.qmp.cmd("migrate", { uri: `exec:cat > ${stateFile}` });
  for (;;) {
    const m = await vm.qmp.cmd("query-migrate");
    if (m.status === "completed") break;
    if (m.status === "failed") throw new Error("raw migrate failed");
    await new Promise((r) => setTimeout(r, 2));
  }
  execFileSync("cp", [join(vm.dir, "disk.qcow2"), `${stateFile}.qcow2`]);
  await vm.qmp.cmd("cont");
}

export async function rawPauseResume(vm: RawVm): Promise<void> {
  await vm.qmp.cmd("stop");
  await vm.qmp.cmd("cont");
}

export async function rawDestroy(vm: RawVm): Promise<void> {
  vm.qmp.close();
  const exited = new Promise((r) => vm.proc.once("exit", r));
  vm.proc.kill("SIGKILL");
  await exited;
  rmSync(vm.dir, { recursive: true, force: true });
}
