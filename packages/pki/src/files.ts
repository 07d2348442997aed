import { randomBytes } from "node:crypto";
import { open, rename, rm } from "node:fs/promises";
import { privateDir } from "@den/protocol";
import { dirname, join } from "node:path";

/**
 * Writes `data` to `path` whole or not at all: a temporary file beside it, created with
 * `mode` (never wider, whatever the umask lets through: it is chmodded too), synced, then
 * renamed over `path`.
 */
export async function writeAtomic(path: string, data: string, mode: number): Promise<void> {
  const tmp = join(dirname(path), `.${randomBytes(6).toString("hex")}.tmp`);
  const f = await open(tmp, "wx", mode);
  try {
    await f.chmod(mode);
    await f.writeFile(data);
    await f.sync();
  } catch (e) {
    await f.close();
    await rm(tmp, { force: true });
    throw e;
  }
  await f.close();
  try {
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
}

/**
 * A machine's identity in `dir`: `key.pem` (0600, when given: a renewal may keep the key),
 * `cert.pem` and `ca.pem` (0644), each written atomically, the key first. The directory is
 * made 0700.
 */
export async function writeIdentityFiles(dir: string, files: { keyPem?: string; certPem: string; caPem: string }): Promise<void> {
  privateDir(dir);
  if (files.keyPem !== undefined) await writeAtomic(join(dir, IDENTITY_FILES.key), files.keyPem, 0o600);
  await writeAtomic(join(dir, IDENTITY_FILES.cert), files.certPem, 0o644);
  await writeAtomic(join(dir, IDENTITY_FILES.ca), files.caPem, 0o644);
}

/** The file names of a machine's identity (writeIdentityFiles) and of a CA (initCa, loadCa). */
export const IDENTITY_FILES = { key: "key.pem", cert: "cert.pem", ca: "ca.pem" } as const;
export const CA_FILES = { key: "ca.key", cert: "ca.crt" } as const;
