import { createHash } from "node:crypto";
import { chownSync, existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";

/** The dir inside a sandbox's dir that its QEMU is chrooted to: only the migration sockets live there. */
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

/** Creates the VM's jail dir (its chroot), owned by its uid and readable by nobody else. */
export function prepareJail(sandboxDir: string, id: { uid: number; gid: number }, name: string = JAIL_DIR): string {
  const dir = join(sandboxDir, name);
  if (!existsSync(dir)) mkdirSync(dir, { mode: 0o700 });
  chownSync(dir, id.uid, id.gid);
  return dir;
}

/**
 * QEMU's own confinement: it drops to the VM's uid and chroots to its jail once its
 * devices are open (7.2's `-runas`/`-chroot`), and its seccomp filter kills it on any
 * fork or exec (`spawn=deny`) or obsolete syscall. (`elevateprivileges=deny` would kill
 * it at its own drop to the uid; a non-root uid has no privileges to raise anyway.)
 */
export function jailArgs(jailDir: string, id: { uid: number; gid: number }): string[] {
  return [
    "-sandbox", "on,obsolete=deny,spawn=deny,resourcecontrol=deny",
    "-runas", `${id.uid}:${id.gid}`,
    "-chroot", jailDir,
  ];
}
