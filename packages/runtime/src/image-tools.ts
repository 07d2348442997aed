import { checkChain, checkImage } from "./image-check.js";
import { runQemuImg } from "./qemu-img.js";

/**
 * Den's qemu-img work on disk images. Each image's header is checked against the chain Den
 * expects before qemu-img runs (image-check.ts), and qemu-img runs unprivileged on the
 * images as descriptors (qemu-img.ts) with every graph stated in full (`json:` names, each
 * image's backing given or null): it follows no backing or data file name a header holds.
 */

/** A qcow2 chain (top first) as one `json:` name whose files are `name(path)`. */
function graphName(chain: readonly string[], name: (path: string) => string): string {
  let node: object | null = null;
  for (let i = chain.length - 1; i >= 0; i--) node = { driver: "qcow2", file: { driver: "file", filename: name(chain[i]!) }, backing: node };
  return `json:${JSON.stringify(node)}`;
}

/**
 * Creates `dest`: an empty qcow2 overlay on `chain[0]` (the chain under it, top first).
 * The backing is not opened (`-u`): its size comes from its checked header.
 */
export async function createOverlay(chain: readonly string[], dest: string): Promise<void> {
  checkChain(chain);
  const { size } = checkImage(chain[0]!, { backing: chain[1] });
  await runQemuImg([[dest, "create"]], (n) => ["create", "-q", "-f", "qcow2", "-u", "-F", "qcow2", "-b", chain[0]!, n(dest), String(size)]);
}

/** Writes the image `chain` reads as (top first) into `dest` (a new file), one standalone qcow2. */
export async function flattenImage(chain: readonly string[], dest: string): Promise<void> {
  checkChain(chain);
  await runQemuImg([...chain.map((p) => [p, "read"] as const), [dest, "create"]], (n) => ["convert", "-q", "-O", "qcow2", graphName(chain, n), n(dest)]);
  checkImage(dest, {});
}

/**
 * Rebases `image` from the chain `from` onto the chain `to` (each top first), keeping what it
 * reads as: what differs between the two is copied into it.
 */
export async function rebaseImage(image: string, from: readonly string[], to: readonly string[]): Promise<void> {
  checkChain([image, ...from]);
  checkChain(to);
  const files = [[image, "write"] as const, ...[...from, ...to].map((p) => [p, "read"] as const)];
  await runQemuImg(files, (n) => ["rebase", "-q", "-F", "qcow2", "-b", graphName(to, n), graphName([image, ...from], n)]);
  // (It wrote the json: name it was given into the header: the real one goes in its place.)
  await setBacking(image, to[0]!);
  checkChain([image, ...to]);
}

/**
 * Makes `image` (from another host: its backing name is that host's) name `backing` instead,
 * without reading either (the two are the same disk). Returns whether it changed.
 */
export async function renameBacking(image: string, backing: string): Promise<boolean> {
  if (checkImage(image, { anyBacking: true }).backing === backing) return false;
  await setBacking(image, backing);
  checkImage(image, { backing });
  return true;
}

/** Writes `backing` as `image`'s backing file name, opening neither (`rebase -u`). */
async function setBacking(image: string, backing: string): Promise<void> {
  await runQemuImg([[image, "write"]], (n) => ["rebase", "-q", "-u", "-F", "qcow2", "-b", backing, graphName([image], n)]);
}

/** Converts a raw image Den made (not a guest) into a new qcow2 file `dest`. */
export async function rawToQcow2(raw: string, dest: string): Promise<void> {
  await runQemuImg([[raw, "read"], [dest, "create"]], (n) => ["convert", "-q", "-f", "raw", "-O", "qcow2", n(raw), n(dest)]);
}
