import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir, release } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { DenError } from "@den/protocol";

const run = promisify(execFile);

export type Accelerator = "kvm" | "tcg";

/** What a snapshot must match to be restored on this host. */
export interface HostProfile {
  qemuBinary: string;
  qemuVersion: string;
  accelerator: Accelerator;
  cpuModel: string;
  machine: "microvm";
  tscKhz: number;
}

let cached: Promise<HostProfile> | undefined;

/** Probes the host once per process: QEMU version, accelerator, TSC frequency. */
export function hostProfile(): Promise<HostProfile> {
  cached ??= probe();
  return cached;
}

async function probe(): Promise<HostProfile> {
  const qemuBinary = process.env.DEN_QEMU ?? "qemu-system-x86_64";
  let qemuVersion: string;
  try {
    const { stdout } = await run(qemuBinary, ["--version"]);
    qemuVersion = /version (\S+)/.exec(stdout)?.[1] ?? "unknown";
  } catch {
    throw new DenError("qemu_error", `${qemuBinary} not found: install qemu-system-x86 (scripts/install-deps.sh)`);
  }
  checkQemuVersion(qemuBinary, qemuVersion);
  const accelerator = await chooseAccelerator(qemuVersion);
  return {
    qemuBinary,
    qemuVersion,
    accelerator,
    cpuModel: accelerator === "kvm" ? "host" : "max",
    machine: "microvm",
    tscKhz: hostTscKhz(),
  };
}

/** The oldest QEMU Den runs: its jail and read-only template RAM need 10.0's options (`-run-with`, `readonly=on,rom=off`). */
export const MIN_QEMU = [10, 0] as const;

/** Refuses a QEMU older than MIN_QEMU, saying where a newer one comes from. */
export function checkQemuVersion(binary: string, version: string): void {
  const [major = 0, minor = 0] = version.split(".").map((n) => Number.parseInt(n, 10));
  if (major > MIN_QEMU[0] || (major === MIN_QEMU[0] && minor >= MIN_QEMU[1])) return;
  throw new DenError("qemu_error", `${binary} is QEMU ${version}; Den needs ${MIN_QEMU.join(".")} or newer (on Debian 12, scripts/install-deps.sh installs it from bookworm-backports)`);
}

/**
 * KVM is used only when asked for or when it demonstrably works: on nested hosts
 * /dev/kvm can exist yet run guests hundreds of times slower than TCG or not at all.
 */
async function chooseAccelerator(qemuVersion: string): Promise<Accelerator> {
  const want = process.env.DEN_ACCEL ?? "auto";
  if (want === "kvm" || want === "tcg") return want;
  if (!existsSync("/dev/kvm")) return "tcg";
  // The probe costs a second or two, so its verdict is kept per host kernel and QEMU.
  const file = join(cacheDir(), `accel-${release()}-${qemuVersion}.json`);
  try {
    const v = JSON.parse(readFileSync(file, "utf8")) as { accelerator?: string };
    if (v.accelerator === "kvm" || v.accelerator === "tcg") return v.accelerator;
  } catch {
    // no verdict yet
  }
  const { probeKvm } = await import("./kvm-probe.js");
  const accelerator: Accelerator = (await probeKvm()) ? "kvm" : "tcg";
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify({ accelerator, probedAt: new Date().toISOString() }));
  return accelerator;
}

/** Where Den keeps expensive, re-derivable artifacts (images, probe results). */
export function cacheDir(): string {
  return process.env.DEN_CACHE_DIR ?? join(homedir(), ".cache", "den");
}

/** Host TSC frequency in kHz: TCG guests see the host's TSC, and calibrating it under TCG is unreliable. */
export function hostTscKhz(): number {
  const info = readFileSync("/proc/cpuinfo", "utf8");
  const mhz = /cpu MHz\s*:\s*([\d.]+)/.exec(info)?.[1];
  if (!mhz) throw new DenError("internal", "cannot read the host TSC frequency from /proc/cpuinfo");
  return Math.round(Number(mhz) * 1000);
}
