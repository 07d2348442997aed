import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, openSync, readFileSync, readdirSync, readlinkSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { DenError } from "@den/protocol";
import { ID_PATTERN } from "./util.js";
import type { HostProfile } from "./host.js";
import { JAIL_DIR, ROUTER_JAIL, jailArgs, prepareJail, vmIdentity } from "./jail/identity.js";
import { SLOT_BYTES, VOLUME_SLOTS, type VolumeAttachment } from "./volumes.js";
import { closeImages, openImages, rootDiskArgs, slotArgs } from "./block-graph.js";

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

/** Unix socket paths are limited to 107 bytes. */
const MAX_SOCKET_PATH = 107;

export interface VmSpec {
  dir: string;
  vcpus: number;
  memoryMb: number;
  /** Guest RAM lives in this file; `share: false` maps it copy-on-write (restores, forks). */
  memoryFile: string;
  shareMemory: boolean;
  /** The root disk's top image (the VM's own, written by it). */
  disk: string;
  /**
   * The images under it, top first: each the backing file of the one before it, the last
   * with none. Stated to QEMU, and checked against each header before it starts (block-graph.ts).
   */
  backing: readonly string[];
  /** Only for a cold boot; a restore takes the kernel from the snapshot's RAM. */
  boot?: { kernel: string; initrd: string; append: string };
  incoming: boolean;
  /**
   * The saved state an incoming VM will load, handed to QEMU as a descriptor at spawn
   * (INCOMING_STATE_FD): QEMU reads it itself, not through Den (see Vm.loadState).
   */
  incomingState?: string;
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
    // (A disk error is reported to the guest, see qemuArgs.)
    "-device", "virtio-blk-device,drive=root,werror=report,rerror=report",
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

/** Identifies the device set and machine shape (not paths) for snapshot compatibility. */
export function deviceSetId(): string {
  const sample: VmSpec = {
    dir: "", vcpus: 1, memoryMb: 1, memoryFile: "", shareMemory: false, disk: "", backing: [], incoming: false,
    macAddress: "", tag: { instance: "", sandbox: "" },
  };
  // (The root disk's error policy is the host's, not part of what a guest sees: it was a
  // -drive option before the disk became a -blockdev graph, and snapshots from then restore.)
  const shape = deviceArgs(sample).map((a) => a.replace(/path=[^,]*/g, "path=").replace(/mac=[^,]*/g, "mac=").replace(",werror=report,rerror=report", ""));
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

/** microvm's firmware (from QEMU's data dir): see qemuArgs. */
export const MICROVM_FIRMWARE = "qboot.rom";

export function qemuArgs(spec: VmSpec, host: HostProfile): string[] {
  checkSocketPaths(spec.dir);
  const accel = host.accelerator === "kvm" ? "kvm" : "tcg,tb-size=64";
  const args = [
    "-name", `den-${spec.tag.sandbox},debug-threads=off`,
    "-M", "microvm,x-option-roms=off,rtc=on,memory-backend=ram",
    // qboot, named: QEMU 7.2's default for microvm. Debian's QEMU 10 ships qboot.rom but finds
    // SeaBIOS's microvm build by default, which never starts this kernel; the firmware's ROM is
    // also part of every saved state (a 64 KiB block), so it is the same one everywhere.
    "-bios", MICROVM_FIRMWARE,
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
    // VM paused on ENOSPC with every other VM on the host paused the same way (werror=report
    // on the device). Its images come in as inherited descriptors (from fd 3 on), the whole
    // graph stated (block-graph.ts): chrooted, QEMU could not open a path when it takes the
    // image over after a restore, and it follows no name an image's header holds.
    ...rootDiskArgs(spec.backing.length, spec.volumes ?? []),
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

/** Starts QEMU detached (it outlives a crash of this process and is adopted on restart). */
export function spawnQemu(spec: VmSpec, host: HostProfile): number {
  prepareJail(spec.dir);
  // The router's jail (see network/): the VM, still root, puts its NIC socket there.
  prepareJail(spec.dir, ROUTER_JAIL);
  const args = qemuArgs(spec, host);
  // (Before anything else is opened: an image Den did not make so is refused here.)
  const images = openImages(spec.disk, spec.backing, spec.volumes ?? []);
  let log: number | undefined;
  let state: number | undefined;
  try {
    log = openSync(join(spec.dir, VM_FILES.log), "a");
    state = spec.incomingState ? openSync(spec.incomingState, "r") : undefined;
    // In a network namespace of its own holding only a loopback that is down: its NIC is a
    // unix socket, so QEMU needs no IP network, and one a guest broke out into reaches no
    // address (the host's services, the metadata address, other hosts) nor any abstract
    // unix socket of the host's. (`unshare` execs QEMU: the pid is QEMU's.)
    const child = spawn("unshare", ["--net", "--", host.qemuBinary, ...args], {
      cwd: spec.dir,
      detached: true,
      stdio: ["ignore", log, log, ...images.disk, state ?? "ignore", ...images.volumes, ...images.backing],
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", DEN_INSTANCE: spec.tag.instance, DEN_SANDBOX: spec.tag.sandbox },
    });
    child.on("error", () => undefined);
    child.unref();
    if (!child.pid) throw new DenError("qemu_error", `cannot start ${host.qemuBinary}`);
    return child.pid;
  } finally {
    if (log !== undefined) closeSync(log);
    closeImages(images);
    if (state !== undefined) closeSync(state);
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
