import { createHash, randomInt } from "node:crypto";
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync } from "node:fs";
import { join } from "node:path";

/** The dir inside a sandbox's dir that its QEMU is chrooted to: only the migration socket Den listens on lives there. */
export const JAIL_DIR = "jail";
/** The router's chroot: the VM's NIC socket and the router's resolv.conf. */
export const ROUTER_JAIL = "router-jail";

/** VMs' uids start here (no passwd entry needed); each VM gets one of 2^24 by its id. */
const UID_BASE = 0x60000000;
const UID_SPAN = 1 << 24;

/**
 * The unprivileged uid (and gid) a VM's QEMU and router run as: one per sandbox, so a
 * QEMU a guest broke out into can reach neither another sandbox's processes nor files.
 * Derived from the instance and sandbox ids, so a restarted Den finds the same one.
 */
export function vmIdentity(instance: string, sandbox: string): { uid: number; gid: number } {
  const h = createHash("sha256").update(`${instance}:${sandbox}`).digest().readUInt32BE(0);
  const uid = UID_BASE + (h % UID_SPAN);
  return { uid, gid: uid };
}

/** qemu-img's uids (image-tool.ts): one of 2^20 per run, below the VMs'; their one group may read the images a run reads. */
const TOOL_UID_BASE = UID_BASE - (1 << 20);
export const TOOL_GID = TOOL_UID_BASE - 1;

/** An unprivileged uid for one qemu-img run (no passwd entry; its group TOOL_GID). */
export function toolIdentity(): { uid: number; gid: number } {
  return { uid: TOOL_UID_BASE + randomInt(1 << 20), gid: TOOL_GID };
}

/**
 * Creates a jail dir (a chroot) that root owns, mode 0711: the jailed process (its own uid)
 * reaches what Den puts there and can create nothing, so no path Den later uses inside it
 * can be a link that process planted (Den, as root, would follow it). A jail an older Den
 * gave its process is taken back; what that process may have left in it, each user of the
 * jail removes before use (an unlink follows no link).
 */
export function prepareJail(sandboxDir: string, name: string = JAIL_DIR): string {
  const dir = join(sandboxDir, name);
  if (!existsSync(dir)) mkdirSync(dir, { mode: 0o711 });
  // (The sandbox dir is root's alone: the jail's own path cannot have been swapped for a link.)
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new Error(`${dir} is not a directory`);
  if (st.uid !== 0 || st.gid !== 0) chownSync(dir, 0, 0);
  // (explicitly: `den serve` runs with umask 077)
  if ((st.mode & 0o7777) !== 0o711) chmodSync(dir, 0o711);
  return dir;
}

/**
 * QEMU's own confinement: it drops to the VM's uid and chroots to its jail once its
 * devices are open (`-run-with`, QEMU 9.1+), and its seccomp filter kills it on any
 * fork or exec (`spawn=deny`) or obsolete syscall. (`elevateprivileges=deny` would kill
 * it at its own drop to the uid; a non-root uid has no privileges to raise anyway.)
 */
export function jailArgs(jailDir: string, id: { uid: number; gid: number }): string[] {
  return [
    "-sandbox", "on,obsolete=deny,spawn=deny,resourcecontrol=deny",
    "-run-with", `user=${id.uid}:${id.gid},chroot=${jailDir}`,
  ];
}
