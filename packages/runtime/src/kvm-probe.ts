import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MICROVM_FIRMWARE } from "./qemu.js";

/**
 * A 32-bit PVH ELF that counts down a register then writes to isa-debug-exit: QEMU
 * exits with status 1 when the loop is done. Timing it under KVM and TCG tells whether
 * KVM really runs guest code at speed.
 */
export function loopElf(iterations: number): Buffer {
  const base = 0x100000;
  const code = Buffer.from([
    0xb9, ...u32(iterations), // mov ecx, N
    0x49, // dec ecx
    0x75, 0xfd, // jnz -3
    0x31, 0xc0, // xor eax, eax
    0xe6, 0xf4, // out 0xf4, al
    0xf4, // hlt
    0xeb, 0xfd, // jmp -3
  ]);
  // PVH entry note: name "Xen", type 18 (XEN_ELFNOTE_PHYS32_ENTRY), desc = entry address.
  const note = Buffer.concat([u32b(4), u32b(4), u32b(18), Buffer.from("Xen\0"), u32b(base + 0x1000)]);
  const ehsize = 52, phsize = 32;
  const noteOff = ehsize + 2 * phsize;
  const codeOff = 0x1000;
  const file = Buffer.alloc(codeOff + code.length);
  const eh = Buffer.concat([
    Buffer.from([0x7f, 0x45, 0x4c, 0x46, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    u16b(2), u16b(3), u32b(1), u32b(base + 0x1000), u32b(ehsize), u32b(0), u32b(0),
    u16b(ehsize), u16b(phsize), u16b(2), u16b(0), u16b(0), u16b(0),
  ]);
  eh.copy(file, 0);
  // PT_LOAD of the whole file at `base`, then PT_NOTE.
  Buffer.concat([u32b(1), u32b(0), u32b(base), u32b(base), u32b(file.length), u32b(file.length), u32b(7), u32b(0x1000)]).copy(file, ehsize);
  Buffer.concat([u32b(4), u32b(noteOff), u32b(0), u32b(0), u32b(note.length), u32b(note.length), u32b(4), u32b(4)]).copy(file, ehsize + phsize);
  note.copy(file, noteOff);
  code.copy(file, codeOff);
  return file;
}

function u32(n: number): number[] {
  return [n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff, (n >>> 24) & 0xff];
}
function u32b(n: number): Buffer {
  return Buffer.from(u32(n));
}
function u16b(n: number): Buffer {
  return Buffer.from([n & 0xff, (n >> 8) & 0xff]);
}

export function runLoop(kernel: string, accel: string, timeoutMs: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const start = process.hrtime.bigint();
    const child = spawn(process.env.DEN_QEMU ?? "qemu-system-x86_64", [
      "-M", "microvm,x-option-roms=off,rtc=off", "-bios", MICROVM_FIRMWARE, "-accel", accel, "-cpu", accel === "kvm" ? "host" : "max", "-m", "32",
      "-nodefaults", "-no-user-config", "-display", "none", "-kernel", kernel,
      "-device", "isa-debug-exit,iobase=0xf4,iosize=4",
    ], { stdio: "ignore" });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve(code === 1 ? Number(process.hrtime.bigint() - start) / 1e6 : undefined);
    });
    child.on("error", () => resolve(undefined));
  });
}

/** True when a KVM guest finishes a CPU loop clearly faster than TCG does. */
export async function probeKvm(): Promise<boolean> {
  const dir = mkdtempSync(join(tmpdir(), "den-kvm-probe-"));
  try {
    const kernel = join(dir, "loop.elf");
    writeFileSync(kernel, loopElf(50_000_000));
    const tcg = await runLoop(kernel, "tcg", 20_000);
    const kvm = await runLoop(kernel, "kvm", tcg ? Math.max(2_000, tcg) : 20_000);
    return kvm !== undefined && (tcg === undefined || kvm * 3 < tcg);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
