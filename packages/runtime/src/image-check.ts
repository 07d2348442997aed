import { closeSync, openSync, readSync } from "node:fs";
import { DenError } from "@den/protocol";

/**
 * A qcow2 header checked against what Den made, before anything (QEMU, qemu-img) opens the
 * image. A VM holds its overlay and volumes read-write: an escaped QEMU could make a header
 * name any host path as backing or data file, which the next opener (root, before any uid
 * drop) would follow. So a header passes only if it is the plain kind Den makes: version 3,
 * no encryption, snapshots, bitmaps or external data file, no header extension Den does not
 * know, and a backing file name that is exactly the one Den expects (or none).
 * Layout per QEMU's docs/interop/qcow2.txt.
 */

const MAGIC = 0x514649fb;
/** What is read of an image: the header, its extensions and the backing name must lie within it. */
const HEAD_BYTES = 64 * 1024;
/** QEMU's own limit on a backing file name. */
const MAX_BACKING_NAME = 1023;

/** Incompatible feature bits Den's images may carry: dirty (lazy refcounts), compression type, extended L2. */
const ALLOWED_INCOMPATIBLE = (1n << 0n) | (1n << 3n) | (1n << 4n);
const EXT_END = 0;
const EXT_BACKING_FORMAT = 0xe2792aca;
const EXT_FEATURE_NAMES = 0x6803f857;
const EXT_DATA_FILE = 0x44415441;

/** What an image's header must say. */
export interface ImageExpectation {
  /** The exact backing file name its header must hold; undefined: it must have none. */
  backing?: string | undefined;
  /** Any backing name will do (an import from another host, whose name is rewritten next). */
  anyBacking?: boolean;
}

/** What a checked header says. */
export interface ImageHeader {
  /** Virtual size in bytes. */
  size: number;
  backing: string | undefined;
}

/** Checks the qcow2 image open on `fd` (`path` names it in errors). */
export function checkImageFd(fd: number, path: string, expect: ImageExpectation): ImageHeader {
  const head = Buffer.alloc(HEAD_BYTES);
  let got = 0;
  while (got < head.length) {
    const n = readSync(fd, head, got, head.length - got, got);
    if (n === 0) break;
    got += n;
  }
  return checkImageHeader(head.subarray(0, got), path, expect);
}

/** Opens `path` read-only and checks it (see checkImageFd). */
export function checkImage(path: string, expect: ImageExpectation): ImageHeader {
  const fd = openSync(path, "r");
  try {
    return checkImageFd(fd, path, expect);
  } finally {
    closeSync(fd);
  }
}

/**
 * Checks a chain of images top first, each the backing of the one before it, the last
 * with none (what Den states to QEMU: see qemu.ts).
 */
export function checkChain(chain: readonly string[]): void {
  chain.forEach((path, i) => checkImage(path, { backing: chain[i + 1] }));
}

/** Checks a header's bytes (the start of an image, up to HEAD_BYTES of it). */
export function checkImageHeader(head: Buffer, path: string, expect: ImageExpectation): ImageHeader {
  const refuse = (why: string): never => {
    throw new DenError("disk_corrupt", `refusing disk image ${path}: ${why} (Den did not make it so; it may have been altered by the VM that held it)`);
  };
  if (head.length < 112) refuse("it is shorter than a qcow2 v3 header");
  if (head.readUInt32BE(0) !== MAGIC) refuse("not a qcow2 image");
  if (head.readUInt32BE(4) !== 3) refuse(`qcow2 version ${head.readUInt32BE(4)}, not 3`);
  const clusterBits = head.readUInt32BE(20);
  if (clusterBits < 9 || clusterBits > 21) refuse(`cluster_bits ${clusterBits} out of 9..21`);
  // Everything checked here must be in the part read, and in the first cluster (the spec's rule).
  const limit = Math.min(head.length, 2 ** clusterBits);
  if (head.readUInt32BE(32) !== 0) refuse("it is encrypted");
  if (head.readUInt32BE(60) !== 0) refuse("it holds internal snapshots");
  const autoclear = head.readBigUInt64BE(88);
  if (autoclear !== 0n) refuse(`autoclear features 0x${autoclear.toString(16)} (bitmaps or raw external data)`);
  const headerLength = head.readUInt32BE(100);
  if (headerLength < 104 || headerLength % 8 !== 0 || headerLength > limit) refuse(`header length ${headerLength}`);

  let backingFormat: string | undefined;
  let at = headerLength;
  for (;;) {
    if (at + 8 > limit) refuse("its header extensions run past the first cluster");
    const type = head.readUInt32BE(at);
    const len = head.readUInt32BE(at + 4);
    const data = at + 8;
    if (data + len > limit) refuse("a header extension runs past the first cluster");
    if (type === EXT_END) break;
    if (type === EXT_BACKING_FORMAT) {
      if (backingFormat !== undefined) refuse("two backing format extensions");
      backingFormat = head.toString("latin1", data, data + len);
    } else if (type === EXT_DATA_FILE) {
      refuse(`it names external data file ${JSON.stringify(head.toString("utf8", data, data + Math.min(len, MAX_BACKING_NAME)))}`);
    } else if (type !== EXT_FEATURE_NAMES) {
      // Bitmaps (0x23852875), encryption (0x0537be77), or one not known.
      refuse(`header extension 0x${type.toString(16).padStart(8, "0")}`);
    }
    at = data + Math.ceil(len / 8) * 8;
  }

  const incompatible = head.readBigUInt64BE(72);
  if (incompatible & (1n << 1n)) refuse("its corrupt bit is set");
  if (incompatible & (1n << 2n)) refuse("its external data file bit is set");
  if (incompatible & ~ALLOWED_INCOMPATIBLE) refuse(`unknown incompatible features 0x${incompatible.toString(16)}`);

  const nameOffset = Number(head.readBigUInt64BE(8));
  const nameSize = head.readUInt32BE(16);
  let backing: string | undefined;
  if (nameOffset !== 0 || nameSize !== 0) {
    if (nameSize === 0 || nameSize > MAX_BACKING_NAME) refuse(`backing file name of ${nameSize} bytes`);
    if (nameOffset < headerLength || nameOffset + nameSize > limit) refuse("its backing file name lies outside the first cluster's header");
    backing = head.toString("utf8", nameOffset, nameOffset + nameSize);
  }
  if (backing !== expect.backing && !(expect.anyBacking && backing !== undefined)) {
    refuse(backing === undefined ? `it names no backing file, expected ${expect.backing}` : expect.backing === undefined ? `it names backing file ${JSON.stringify(backing)}, expected none` : `it names backing file ${JSON.stringify(backing)}, expected ${expect.backing}`);
  }
  if (backing !== undefined && backingFormat !== "qcow2") refuse(`backing format ${JSON.stringify(backingFormat ?? "(none: probed)")}, expected qcow2`);
  if (backing === undefined && backingFormat !== undefined) refuse("a backing format without a backing file");
  const size = head.readBigUInt64BE(24);
  if (size > BigInt(Number.MAX_SAFE_INTEGER)) refuse(`virtual size ${size}`);
  return { size: Number(size), backing };
}
