import { closeSync, openSync } from "node:fs";
import { checkImageFd } from "./image-check.js";
import { SLOT_BYTES, VOLUME_SLOTS, type VolumeAttachment } from "./volumes.js";

/**
 * A VM's block graph, stated in full on QEMU's command line: every image is opened by Den,
 * its header checked (image-check.ts) on the descriptor QEMU then gets, and handed over as
 * an inherited descriptor; each qcow2 node names its backing node, or `backing=null`. QEMU
 * never opens a path it read from an image's header (a VM can write its overlay's and its
 * volumes' headers), and a chrooted QEMU could not open a path anyway.
 */

/** The descriptors of a VM's images, as spawnQemu hands them over (from fd 3 on). */
export interface ImageFds {
  /** The root disk (its top image): read-write, then read-only. */
  disk: [number, number];
  /** The volumes', in slot order: [read-only] or [read-write, read-only] each (slotArgs' order). */
  volumes: number[];
  /** The root disk's backing images, top first, read-only. */
  backing: number[];
}

/** The descriptor the root disk is at in QEMU (then its read-only one). */
export const DISK_FD = 3;
/** The first descriptor of the volumes' (after the disk's two and the incoming state's). */
const VOLUME_FD = 6;
/** fdsets: 1 the root disk, 2 + slot a volume, BACKING_SET + i the root disk's backing images. */
const BACKING_SET = 2 + VOLUME_SLOTS;

/**
 * Opens a VM's images and checks each header against what Den expects: the root disk's
 * chain exactly as `backing` says (each image's backing file the next, the last none), the
 * volumes without any. Throws `disk_corrupt` on the first that differs (nothing left open).
 */
export function openImages(disk: string, backing: readonly string[], volumes: readonly VolumeAttachment[]): ImageFds {
  const opened: number[] = [];
  const open = (path: string, flags: "r" | "r+") => {
    const fd = openSync(path, flags);
    opened.push(fd);
    return fd;
  };
  try {
    const rw = open(disk, "r+");
    const ro = open(disk, "r");
    checkImageFd(ro, disk, { backing: backing[0] });
    const volumeFds: number[] = [];
    for (const v of [...volumes].sort((a, b) => a.slot - b.slot)) {
      const vro = open(v.image, "r");
      checkImageFd(vro, v.image, {});
      if (v.readOnly) volumeFds.push(vro);
      else volumeFds.push(open(v.image, "r+"), vro);
    }
    const backingFds = backing.map((path, i) => {
      const fd = open(path, "r");
      checkImageFd(fd, path, { backing: backing[i + 1] });
      return fd;
    });
    return { disk: [rw, ro], volumes: volumeFds, backing: backingFds };
  } catch (e) {
    for (const fd of opened) closeSync(fd);
    throw e;
  }
}

export function closeImages(fds: ImageFds): void {
  for (const fd of [...fds.disk, ...fds.volumes, ...fds.backing]) closeSync(fd);
}

/** How many descriptors slotArgs names. */
function volumeFdCount(volumes: readonly VolumeAttachment[]): number {
  return volumes.reduce((n, v) => n + (v.readOnly ? 1 : 2), 0);
}

/**
 * The root disk: its backing images bottom-up as read-only qcow2 nodes, each over the next
 * (`backing=null` at the bottom), its top image read-write over them, and a throttle node
 * (`root`, which the device and block_resize name) over that. One descriptor per access
 * mode for the top: QEMU picks the one that matches how it opens; no image locking, since
 * the two would lock each other out, and the overlay is this VM's alone.
 */
export function rootDiskArgs(backingCount: number, volumes: readonly VolumeAttachment[]): string[] {
  const args = ["-add-fd", `fd=${DISK_FD},set=1`, "-add-fd", `fd=${DISK_FD + 1},set=1`];
  const firstFd = VOLUME_FD + volumeFdCount(volumes);
  const node = (i: number) => (i < backingCount ? `root-b${i}` : null);
  for (let i = backingCount - 1; i >= 0; i--) {
    args.push("-add-fd", `fd=${firstFd + i},set=${BACKING_SET + i}`);
    args.push("-blockdev", qcow2Node(`root-b${i}`, BACKING_SET + i, { readOnly: true, backing: node(i + 1) }));
  }
  args.push("-blockdev", qcow2Node("root-q", 1, { readOnly: false, backing: node(0), discard: true }));
  args.push("-object", `throttle-group,id=root-limit,${diskThrottle()}`);
  args.push("-blockdev", "driver=throttle,node-name=root,throttle-group=root-limit,file=root-q");
  return args;
}

/**
 * Each slot's medium: a volume's qcow2 through inherited descriptors (as the root disk: a
 * chrooted QEMU cannot open paths), with no backing image, read-only in QEMU itself for a
 * read-only mount (the guest is root: only the host can hold it to that), or nothing.
 */
export function slotArgs(volumes: readonly VolumeAttachment[]): string[] {
  const args: string[] = [];
  let fd = VOLUME_FD;
  for (let slot = 0; slot < VOLUME_SLOTS; slot++) {
    const v = volumes.find((x) => x.slot === slot);
    if (!v) {
      args.push("-blockdev", `driver=null-co,node-name=vol${slot},size=${SLOT_BYTES},read-zeroes=on`);
      continue;
    }
    const set = 2 + slot;
    if (!v.readOnly) args.push("-add-fd", `fd=${fd++},set=${set}`);
    args.push("-add-fd", `fd=${fd++},set=${set}`);
    args.push("-blockdev", qcow2Node(`volq${slot}`, set, { readOnly: v.readOnly, backing: null, discard: true }));
    args.push("-blockdev", `driver=throttle,node-name=vol${slot},read-only=${v.readOnly ? "on" : "off"},throttle-group=volumes,file=volq${slot}`);
  }
  // One ceiling for all of a VM's volumes, the root disk's again.
  if (volumes.length) args.unshift("-object", `throttle-group,id=volumes,${diskThrottle()}`);
  return args;
}

/**
 * A qcow2 node over an fdset, its backing node named or none. (In JSON: in QEMU's key=value
 * form `backing=null` names a node called "null", and without `backing` QEMU opens whatever
 * the image's header names.)
 */
function qcow2Node(name: string, fdset: number, o: { readOnly: boolean; backing: string | null; discard?: boolean }): string {
  return JSON.stringify({
    driver: "qcow2", "node-name": name, "read-only": o.readOnly,
    file: { driver: "file", filename: `/dev/fdset/${fdset}`, locking: "off" },
    ...(o.discard ? { discard: "unmap", "detect-zeroes": "unmap" } : {}),
    backing: o.backing,
  });
}

/**
 * A throttle group's limits, QEMU's own throttling (cgroup v1's blkio does not hold back
 * buffered writes): `DEN_DISK_MBPS_MAX` MB/s and `DEN_DISK_IOPS_MAX` operations a second.
 */
function diskThrottle(): string {
  const mbps = Number(process.env.DEN_DISK_MBPS_MAX ?? 400);
  const iops = Number(process.env.DEN_DISK_IOPS_MAX ?? 10_000);
  return `x-bps-total=${Math.round(mbps * 1_000_000)},x-iops-total=${Math.round(iops)}`;
}
