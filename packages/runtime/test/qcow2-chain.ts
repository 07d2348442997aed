import { execFileSync } from "node:child_process";
import { join } from "node:path";

/** qemu-img, its output captured (a failure throws with it). */
export const qemuImg = (...args: string[]) => execFileSync("qemu-img", args, { stdio: ["ignore", "pipe", "pipe"] });

/** base <- mid <- top in `dir`, as Den's qemu-img steps make them (64 MiB, qcow2 backing format named). */
export function qcow2Chain(dir: string): { base: string; mid: string; top: string } {
  const base = join(dir, "base.qcow2");
  const mid = join(dir, "mid.qcow2");
  const top = join(dir, "top.qcow2");
  qemuImg("create", "-q", "-f", "qcow2", base, "64M");
  qemuImg("create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, mid);
  qemuImg("create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", mid, top);
  return { base, mid, top };
}
