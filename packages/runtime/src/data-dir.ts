import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { prepareNativeTools } from "./native.js";
import { isAlive } from "./qemu.js";
import { ID_PATTERN, newId, privateDir } from "./util.js";

export function defaultDataDir(): string {
  return process.env.DEN_DATA_DIR ?? "/var/lib/den";
}

/** Where each thing of one runtime lives under its data dir: one place, so no module guesses a path. */
export class DataDirLayout {
  constructor(
    readonly root: string,
    readonly instance: string,
  ) {}

  get sandboxes(): string {
    return join(this.root, "sandboxes");
  }

  sandbox(id: string): string {
    return join(this.sandboxes, id);
  }

  get snapshots(): string {
    return join(this.root, "snapshots");
  }

  snapshot(id: string): string {
    return join(this.snapshots, id);
  }

  get pins(): string {
    return join(this.root, "pins");
  }

  get pool(): string {
    return join(this.root, "pool");
  }

  get overlays(): string {
    return join(this.root, "overlays");
  }

  /** Where forks keep their shared RAM files: tmpfs when the host has one. */
  get ramDir(): string {
    return existsSync("/dev/shm") ? join("/dev/shm", `den-${this.instance}`) : join(this.root, "ram");
  }

  /** A fork snapshot's shared RAM file. */
  ramFile(snapshotId: string): string {
    return join(this.ramDir, `${snapshotId}.ram`);
  }
}

/** Makes the data dir's folders and reads (or mints) the id of this runtime instance. */
export async function prepareDataDir(dataDir: string): Promise<string> {
  privateDir(dataDir);
  for (const d of ["templates", "sandboxes", "snapshots"]) await mkdir(join(dataDir, d), { recursive: true });
  prepareNativeTools(dataDir);
  const idFile = join(dataDir, "instance-id");
  let instance = existsSync(idFile) ? readFileSync(idFile, "utf8").trim() : "";
  if (!ID_PATTERN.test(instance)) {
    instance = newId("den");
    await writeFile(idFile, instance + "\n");
  }
  return instance;
}

/**
 * One runtime per data dir: a second one would adopt (and on recovery kill) the first
 * one's VMs. The lock names the owning pid, so a crashed owner's lock is taken over.
 */
export function lockDataDir(dataDir: string): void {
  const lock = join(dataDir, "lock");
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(lock, `${process.pid}\n`, { flag: "wx" });
      return;
    } catch {
      const owner = Number(readFileSync(lock, "utf8").trim());
      if (owner && owner !== process.pid && isAlive(owner)) {
        throw new DenError("invalid_state", `data dir ${dataDir} is in use by process ${owner}`);
      }
      rmSync(lock, { force: true });
    }
  }
  throw new DenError("invalid_state", `cannot lock data dir ${dataDir}`);
}

export function unlockDataDir(dataDir: string): void {
  const lock = join(dataDir, "lock");
  try {
    if (Number(readFileSync(lock, "utf8").trim()) === process.pid) rmSync(lock, { force: true });
  } catch {
    // not locked by us
  }
}

/** Runtimes of this process being closed, by data dir: what they have yet to finish (a pool spawn in flight). */
const closing = new Map<string, Promise<void>>();

/** Notes that a closed runtime of `dataDir` is still finishing `work`: an open of the same dir waits for it. */
export function finishingClose(dataDir: string, work: Promise<void>): void {
  const settled: Promise<void> = work.finally(() => {
    if (closing.get(dataDir) === settled) closing.delete(dataDir);
  });
  closing.set(dataDir, settled);
}

/** What a runtime of this process closed on `dataDir` has yet to finish, if anything. */
export function closeOf(dataDir: string): Promise<void> | undefined {
  return closing.get(dataDir);
}
