import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, openSync, readFileSync, readdirSync, readlinkSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { DenError } from "@den/protocol";
import { ID_PATTERN } from "./util.js";
import type { HostProfile } from "./host.js";
import { JAIL_DIR, ROUTER_JAIL, jailArgs, prepareJail, vmIdentity } from "./jail/identity.js";
import { SLOT_BYTES, VOLUME_SLOTS, type VolumeAttachment } from "./volumes.js";

/** Socket and file names inside a sandbox directory. */
export const VM_FILES = {
  qmp: "qmp.sock",
  agent: "agent.sock",
  console: "console.sock",
  /** In the router's jail: the router connects to it once chrooted there. */
  net: "router-jail/net.sock",
  disk: "disk.qcow2",
  pid: "qemu.pid",
  log: "qemu.log",
  consoleLog: "console.log",
} as const;

/** The descriptor a VM's disk image is handed to QEMU on. */
const DISK_FD = 3;

/** Unix socket paths are limited to 107 bytes. */
const MAX_SOCKET_PATH = 107;

export interface VmSpec {
  dir: string;
  vcpus: number;
  memoryMb: number;
  /** Guest RAM lives in this file; `share: false` maps it copy-on-write (restores, forks). */
  memoryFile: string;
  shareMemory: boolean;
  disk: string;
  /** Only for a cold boot; a restore takes the kernel from the snapshot's RAM. */
  boot?: { kernel: string; initrd: string; append: string };
  incoming: boolean;
  /**
   * The saved state an incoming VM will load, handed to QEMU as a descriptor at spawn
   * (INCOMING_STATE_FD): QEMU reads it itself, not through Den (see Vm.loadState).
   */
  incomingState?: string;
  /** Or a descriptor to read it from (a pipe a decompressor writes into; the caller closes it). */
  incomingFd?: number;
  macAddress: string;
  tag: { instance: string; sandbox: string };
  /** Volumes in their slots (the other slots are empty). */
  volumes?: VolumeAttachment[];
}

/**
 * The device set every Den VM has. Snapshots record a hash of it: a snapshot only
 * restores into a VM with exactly these devices.
 */
function deviceArgs(spec: VmSpec): string[] {
  const f = (name: string) => join(spec.dir, name);
  return [
    "-device", "virtio-blk-device,drive=root",
    "-device", "virtio-serial-device,max_ports=2",
    "-chardev", `socket,id=agent,path=${f(VM_FILES.agent)},server=on,wait=off`,
    "-device", "virtserialport,chardev=agent,name=den.agent",
    "-chardev", `socket,id=console,path=${f(VM_FILES.console)},server=on,wait=off`,
    "-serial", "chardev:console",
    // The NIC's host side is a socket only Den connects to: with nothing connected it leads nowhere.
    "-netdev", `stream,id=net0,server=on,addr.type=unix,addr.path=${f(VM_FILES.net)}`,
    "-device", `virtio-net-device,netdev=net0,mac=${spec.macAddress}`,
    "-object", "rng-random,id=rng0,filename=/dev/urandom",
    "-device", "virtio-rng-device,rng=rng0",
    // Volume slots (volumes.ts): fixed, whatever each holds.
    ...Array.from({ length: VOLUME_SLOTS }, (_, i) => ["-device", `virtio-blk-device,drive=vol${i},serial=den-vol-${i}`]).flat(),
  ];
}

/** The first descriptor of the volumes' (spawnQemu's stdio, after the incoming state's). */
const VOLUME_FD = 6;

/**
 * Each slot's medium: a volume's qcow2 through inherited descriptors (as the root disk: a
 * chrooted QEMU cannot open paths), read-only in QEMU itself for a read-only mount (the
 * guest is root: only the host can hold it to that), or nothing.
 */
function slotArgs(volumes: VolumeAttachment[]): string[] {
  const args: string[] = [];
  let fd = VOLUME_FD;
  for (let slot = 0; slot < VOLUME_SLOTS; slot++) {
    const v = volumes.find((x) => x.slot === slot);
    if (!v) {
      args.push("-blockdev", `driver=null-co,node-name=vol${slot},size=${SLOT_BYTES},read-zeroes=on`);
      continue;
    }
    const set = 2 + slot;
    args.push("-add-fd", `fd=${fd++},set=${set}`);
    if (!v.readOnly) args.push("-add-fd", `fd=${fd++},set=${set}`);
    args.push("-blockdev", `driver=qcow2,node-name=volq${slot},read-only=${v.readOnly ? "on" : "off"},file.driver=file,file.filename=/dev/fdset/${set},file.locking=off,discard=unmap,detect-zeroes=unmap`);
    args.push("-blockdev", `driver=throttle,node-name=vol${slot},read-only=${v.readOnly ? "on" : "off"},throttle-group=volumes,file=volq${slot}`);
  }
  // One ceiling for all of a VM's volumes, the root disk's again.
  if (volumes.length) args.unshift("-object", `throttle-group,id=volumes,${diskThrottle().replace(/throttling\.(bps|iops)-total/g, "x-$1-total")}`);
  return args;
}

/** The descriptors slotArgs names, in its order: [read-only] or [read-write, read-only] per volume. */
function openVolumeFds(volumes: VolumeAttachment[]): number[] {
  const fds: number[] = [];
  try {
    for (const v of [...volumes].sort((a, b) => a.slot - b.slot)) {
      if (v.readOnly) fds.push(openSync(v.image, "r"));
      else fds.push(openSync(v.image, "r"), openSync(v.image, "r+"));
    }
    return fds;
  } catch (e) {
    for (const fd of fds) closeSync(fd);
    throw e;
  }
}

/** Identifies the device set and machine shape (not paths) for snapshot compatibility. */
export function deviceSetId(): string {
  const sample: VmSpec = {
    dir: "", vcpus: 1, memoryMb: 1, memoryFile: "", shareMemory: false, disk: "", incoming: false,
    macAddress: "", tag: { instance: "", sandbox: "" },
  };
  const shape = deviceArgs(sample).map((a) => a.replace(/path=[^,]*/g, "path=").replace(/mac=[^,]*/g, "mac="));
  // A guest that probed its volume slots knows their size: it is part of the shape.
  return createHash("sha256").update(["microvm", "x-option-roms=off,rtc=on", ...shape, `slots=${SLOT_BYTES}`].join("\0")).digest("hex").slice(0, 16);
}

/** Throws unless every socket of a VM in `dir` fits a unix socket path. */
export function checkSocketPaths(dir: string): void {
  for (const name of [VM_FILES.qmp, VM_FILES.agent, VM_FILES.console, VM_FILES.net, join(JAIL_DIR, "migrate-out.sock")]) {
    if (Buffer.byteLength(join(dir, name)) > MAX_SOCKET_PATH) {
      throw new DenError("path_too_long", `sandbox directory ${dir} is too deep for unix sockets; use a shorter data dir`);
    }
  }
}

export function qemuArgs(spec: VmSpec, host: HostProfile): string[] {
  checkSocketPaths(spec.dir);
  const accel = host.accelerator === "kvm" ? "kvm" : "tcg,tb-size=64";
  const args = [
    "-name", `den-${spec.tag.sandbox},debug-threads=off`,
    "-M", "microvm,x-option-roms=off,rtc=on,memory-backend=ram",
    "-accel", accel,
    "-cpu", host.cpuModel,
    "-smp", String(spec.vcpus),
    "-m", `${spec.memoryMb}M`,
    // A RAM file restored from (a template's or a snapshot's, which other VMs map too) is
    // opened read-only and mapped private and writable (`readonly=on,rom=off`, QEMU 8.2+):
    // an escaped QEMU holds no descriptor that could change another VM's memory.
    "-object", `memory-backend-file,id=ram,size=${spec.memoryMb}M,mem-path=${spec.memoryFile},${spec.shareMemory ? "share=on" : "share=off,readonly=on,rom=off"}`,
    "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
    // Its own uid, a chroot holding only its migration sockets, and no fork or exec (jail/).
    ...jailArgs(join(spec.dir, JAIL_DIR), vmIdentity(spec.tag.instance, spec.tag.sandbox)),
    // A full host disk is an I/O error inside this guest (its filesystem reports it), never a
    // VM paused on ENOSPC with every other VM on the host paused the same way.
    // The disk comes in as inherited descriptors (fds 3 and 4): chrooted, QEMU could not open its
    // path again when it takes the image over after a restore.
    // (one descriptor per access mode: QEMU picks the one that matches how it opens; no image
    // locking, since the two would lock each other out, and the overlay is this VM's alone)
    "-add-fd", `fd=${DISK_FD},set=1`, "-add-fd", `fd=${DISK_FD + 1},set=1`,
    "-drive", `id=root,if=none,format=qcow2,file.driver=file,file.filename=/dev/fdset/1,file.locking=off,discard=unmap,detect-zeroes=unmap,werror=report,rerror=report,${diskThrottle()}`,
    ...slotArgs(spec.volumes ?? []),
    ...deviceArgs(spec),
    "-qmp", `unix:${join(spec.dir, VM_FILES.qmp)},server=on,wait=off`,
    "-pidfile", join(spec.dir, VM_FILES.pid),
  ];
  if (spec.boot) args.push("-kernel", spec.boot.kernel, "-initrd", spec.boot.initrd, "-append", spec.boot.append);
  if (spec.incoming) args.push("-incoming", "defer");
  return args;
}

export function bootCommandLine(host: HostProfile): string {
  return [
    "console=ttyS0", "quiet", "loglevel=3", "panic=-1", "reboot=t",
    // TSC calibration fails at random under TCG without a timer to calibrate against.
    "tsc=reliable", `tsc_early_khz=${host.tscKhz}`,
    // Everything inside a sandbox belongs to one user, and KPTI's page-table switches flush TCG's TLB.
    "mitigations=off", "8250.nr_uarts=1", "random.trust_cpu=on",
  ].join(" ");
}

/**
 * A VM's disk I/O ceiling, QEMU's own throttling (cgroup v1's blkio does not hold back
 * buffered writes): `DEN_DISK_MBPS_MAX` MB/s and `DEN_DISK_IOPS_MAX` operations a second.
 */
function diskThrottle(): string {
  const mbps = Number(process.env.DEN_DISK_MBPS_MAX ?? 400);
  const iops = Number(process.env.DEN_DISK_IOPS_MAX ?? 10_000);
  return `throttling.bps-total=${Math.round(mbps * 1_000_000)},throttling.iops-total=${Math.round(iops)}`;
}

/** Starts QEMU detached (it outlives a crash of this process and is adopted on restart). */
export function spawnQemu(spec: VmSpec, host: HostProfile): number {
  prepareJail(spec.dir);
  // The router's jail (see network/): the VM, still root, puts its NIC socket there.
  prepareJail(spec.dir, ROUTER_JAIL);
  const args = qemuArgs(spec, host);
  const log = openSync(join(spec.dir, VM_FILES.log), "a");
  const disk = openSync(spec.disk, "r+");
  const diskRo = openSync(spec.disk, "r");
  const state = spec.incomingFd ?? (spec.incomingState ? openSync(spec.incomingState, "r") : undefined);
  const volumeFds = openVolumeFds(spec.volumes ?? []);
  try {
    // In a network namespace of its own holding only a loopback that is down: its NIC is a
    // unix socket, so QEMU needs no IP network, and one a guest broke out into reaches no
    // address (the host's services, the metadata address, other hosts) nor any abstract
    // unix socket of the host's. (`unshare` execs QEMU: the pid is QEMU's.)
    const child = spawn("unshare", ["--net", "--", host.qemuBinary, ...args], {
      cwd: spec.dir,
      detached: true,
      stdio: ["ignore", log, log, disk, diskRo, state ?? "ignore", ...volumeFds],
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", DEN_INSTANCE: spec.tag.instance, DEN_SANDBOX: spec.tag.sandbox },
    });
    child.on("error", () => undefined);
    child.unref();
    if (!child.pid) throw new DenError("qemu_error", `cannot start ${host.qemuBinary}`);
    return child.pid;
  } finally {
    closeSync(log);
    closeSync(disk);
    closeSync(diskRo);
    for (const fd of volumeFds) closeSync(fd);
    if (state !== undefined && spec.incomingFd === undefined) closeSync(state);
  }
}

/** The descriptor an incoming VM's saved state is at in QEMU (spawnQemu's stdio). */
export const INCOMING_STATE_FD = 5;

/** The tag prefix of a pooled QEMU (pool.ts): spawned before any sandbox owns it. */
export const POOL_TAG_PREFIX = "vm_";

export interface ProcessTags {
  instance: string;
  /** The sandbox it runs (a pooled QEMU not yet claimed: its own tag). */
  sandbox: string;
  /** The tag it was started with, fixed for its life: its uid and cgroup derive from it. */
  vm: string;
}

/** The Den tags of a live process, read from its environment; undefined if it's not Den's QEMU. */
export function processTags(pid: number): ProcessTags | undefined {
  try {
    if (!readlinkSync(`/proc/${pid}/exe`).includes("qemu-system")) return undefined;
    const env = readFileSync(`/proc/${pid}/environ`, "latin1").split("\0");
    const instance = env.find((e) => e.startsWith("DEN_INSTANCE="))?.slice(13);
    const vm = env.find((e) => e.startsWith("DEN_SANDBOX="))?.slice(12);
    if (!instance || !vm) return undefined;
    return { instance, vm, sandbox: vm.startsWith(POOL_TAG_PREFIX) ? claimedBy(pid) ?? vm : vm };
  } catch {
    return undefined;
  }
}

/**
 * The sandbox a pooled QEMU was claimed by: its directory, renamed to the sandbox's at
 * the claim, is the process's working directory (its jail inside it, once chrooted).
 */
function claimedBy(pid: number): string | undefined {
  try {
    let dir = readlinkSync(`/proc/${pid}/cwd`);
    if (basename(dir) === JAIL_DIR) dir = dirname(dir);
    const id = basename(dir);
    return ID_PATTERN.test(id) && !id.startsWith(POOL_TAG_PREFIX) ? id : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Every live QEMU process started by the given Den instance, by the sandbox it runs.
 * Pooled QEMUs no sandbox has claimed yet (by their own tag) only with `pooled`.
 */
export function findInstanceProcesses(instance: string, opts: { pooled?: boolean } = {}): Map<string, number> {
  const found = new Map<string, number>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const tags = processTags(Number(name));
    if (tags?.instance !== instance) continue;
    if (!opts.pooled && tags.sandbox.startsWith(POOL_TAG_PREFIX)) continue;
    found.set(tags.sandbox, Number(name));
  }
  return found;
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether a process has exited: gone, or a zombie with no thread left running. A zombie holds
 * nothing but its pid (its memory, files and cgroups are released before it becomes one), and
 * an adopted QEMU's zombie is reaped by init, whenever init gets to it (here PID 1 reaped about
 * every 1.7 s, and each adoption or destroy of an adopted VM waited for it).
 */
export function hasExited(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    const state = stat.charAt(stat.lastIndexOf(")") + 2);
    if (state !== "Z" && state !== "X") return false;
    // (SIGKILL takes a process's threads down one by one: the leader can be a zombie first.)
    return readdirSync(`/proc/${pid}/task`).length <= 1;
  } catch {
    return true;
  }
}

/** SIGKILLs a QEMU and waits until it has exited (bounded). */
export async function killAndWait(pid: number, timeoutMs = 5_000): Promise<void> {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    return;
  }
  const deadline = Date.now() + timeoutMs;
  while (!hasExited(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
}
