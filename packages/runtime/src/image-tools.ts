import { checkChain, checkImage } from "./image-check.js";
import { runTool } from "./util.js";

/**
 * Den's qemu-img work on disk images, each image's header checked against the chain Den
 * expects before qemu-img opens it (image-check.ts): qemu-img follows the backing and data
 * file names it finds, and a VM may have written them.
 */

/**
 * Creates `dest`: an empty qcow2 overlay on `chain[0]` (the chain under it, top first).
 * The backing is not opened (`-u`): its size comes from its checked header.
 */
export async function createOverlay(chain: readonly string[], dest: string): Promise<void> {
  checkChain(chain);
  const { size } = checkImage(chain[0]!, { backing: chain[1] });
  await runTool("qemu-img", ["create", "-q", "-f", "qcow2", "-u", "-F", "qcow2", "-b", chain[0]!, dest, String(size)], "qemu_error");
}

/** Writes the image `chain` reads as (top first) into `dest`, one standalone qcow2. */
export async function flattenImage(chain: readonly string[], dest: string): Promise<void> {
  checkChain(chain);
  await runTool("qemu-img", ["convert", "-q", "-f", "qcow2", "-O", "qcow2", chain[0]!, dest], "qemu_error");
}

/**
 * Rebases `image` from the chain `from` onto the chain `to` (each top first), keeping what it
 * reads as: what differs between the two is copied into it.
 */
export async function rebaseImage(image: string, from: readonly string[], to: readonly string[]): Promise<void> {
  checkChain([image, ...from]);
  checkChain(to);
  await runTool("qemu-img", ["rebase", "-q", "-f", "qcow2", "-F", "qcow2", "-b", to[0]!, image], "qemu_error");
  checkChain([image, ...to]);
}

/**
 * Makes `image` (from another host: its backing name is that host's) name `backing` instead,
 * without reading either (the two are the same disk). Returns whether it changed.
 */
export async function renameBacking(image: string, backing: string): Promise<boolean> {
  if (checkImage(image, { anyBacking: true }).backing === backing) return false;
  await runTool("qemu-img", ["rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2", "-b", backing, image], "qemu_error");
  checkImage(image, { backing });
  return true;
}
