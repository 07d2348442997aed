/**
 * The in-memory host's state on disk, so that a `kill -9` of the process it runs in loses
 * what a real host would not: a real host's VMs are QEMU processes that outlive it, and its
 * templates, local snapshots and volume images are files. One JSON file in the data dir
 * (`memory-host.json`), written whole, synchronously and atomically (a temp file, fsync,
 * rename) after every change a real host would have on disk or in a running QEMU at that
 * moment; read back by `MemoryHostAgent.open` on the same dir.
 *
 * Kept: the instance id, every sandbox (state, shape, template version, files, buffered
 * processes, volumes in their slots, network policy and refusal counts, CPU seconds), local
 * (warm) snapshots, template versions and which is current, template pins, volume images.
 * Not kept, as a real host's restart does not keep them: the operation journal, operations,
 * streams and execs in flight, the test's scripts, listeners and faults.
 *
 * The write stays cheap: a sandbox's or a volume's text is kept from the last write and
 * made again only when a guest changed it (or a host operation ran), a template version's
 * never (versions do not change).
 */
import { closeSync, existsSync, fsyncSync, openSync, readFileSync, readdirSync, renameSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import { DenError, type api, type host } from "@den/protocol";
import type { FsWatch } from "./memory-fs.js";
import type { GuestImage } from "./memory-guest.js";
import type { SandboxImage } from "./memory-image.js";
import type { MemoryTemplate, TemplateRef } from "./memory-templates.js";
import type { SerialVolume } from "./memory-volumes.js";
import type { HostState, MemoryVmState, Shape } from "./host-state.js";

/** The file, in the host's data dir. */
export const HOST_FILE = "memory-host.json";
const FORMAT = "den-memory-host/1";
/** The most state the file may hold: a change that would take it past this is refused. */
export const MAX_STATE_BYTES = 64 * 1024 * 1024;
const TEMP = /^memory-host\.json\.\d+\.tmp$/;

export interface SavedSandbox {
  id: string;
  state: MemoryVmState;
  template: TemplateRef;
  shape: Shape;
  volumes: host.VolumeSpec[];
  network: api.NetworkPolicy | null;
  refused: host.Refusals;
  /** CPU seconds so far, since when it has run (clock ms; null: not running), and its load. */
  cpu: { seconds: number; since: number | null; share: number };
  /** Its root filesystem and its buffered processes (a streamed exec is its caller's, and is not kept). */
  guest: GuestImage;
}

export type SavedVolume = SerialVolume & { inode: number };

/** What `memory-host.json` holds. */
export interface SavedHost {
  format: typeof FORMAT;
  instance: string;
  savedAt: string;
  sandboxes: SavedSandbox[];
  /** Local (warm) snapshots, by id. */
  warm: Record<string, SandboxImage>;
  templates: { versions: MemoryTemplate[]; current: Record<string, string> };
  /** Template versions (name@version) stored snapshots need, by holder. */
  pins: Record<string, string>;
  volumes: { nextInode: number; images: SavedVolume[] };
}

/** What a persisted host holds, read without opening it (`MemoryHostAgent.readState`). */
export interface MemoryHostState {
  instance: string;
  /** Its VMs, as its inventory would list them. */
  vms: Array<{ id: string; state: MemoryVmState }>;
  /** Local (warm) snapshot ids. */
  snapshots: string[];
  /** Template versions, name@version. */
  templates: string[];
  /** Volume images. */
  volumes: string[];
  /** Template pins: holder to name@version. */
  pins: Record<string, string>;
}

const mib = (bytes: number) => (bytes / (1024 * 1024)).toFixed(1);

/** Reads a data dir's state file; undefined if there is none. */
export function readHostFile(dir: string): SavedHost | undefined {
  const path = join(dir, HOST_FILE);
  if (!existsSync(path)) return undefined;
  const saved = JSON.parse(readFileSync(path, "utf8")) as Partial<SavedHost>;
  if (saved.format !== FORMAT || typeof saved.instance !== "string" || !Array.isArray(saved.sandboxes)) {
    throw new DenError("internal", `${path} is not an in-memory host's state (format ${JSON.stringify(saved.format)}, expected ${FORMAT})`);
  }
  return saved as SavedHost;
}

export function summarize(saved: SavedHost): MemoryHostState {
  return {
    instance: saved.instance,
    vms: saved.sandboxes.map((s) => ({ id: s.id, state: s.state })),
    snapshots: Object.keys(saved.warm),
    templates: saved.templates.versions.map((t) => `${t.name}@${t.version}`),
    volumes: saved.volumes.images.map((v) => v.id),
    pins: { ...saved.pins },
  };
}

/**
 * Writes a host's state to its data dir (or, with no dir, nowhere). Host operations run
 * their changes in `change(fn)`: the file is written once they are all made (nested
 * changes, once the outermost is). A guest's files and processes change on their own
 * (an exec, a file write): `sandboxChanged` writes at once, outside any change.
 */
export class HostFile {
  private depth = 0;
  private on = false;
  private state: HostState | undefined;
  private bytes = 0;
  private readonly sandboxText = new Map<string, string>();
  private readonly volumeText = new Map<string, string>();
  private readonly templateText = new WeakMap<MemoryTemplate, string>();

  /** `dir`: the data dir (undefined: nothing is written). */
  constructor(readonly dir: string | undefined) {
    if (!dir) return;
    // A write a kill cut short left its temp file.
    for (const f of readdirSync(dir)) if (TEMP.test(f)) rmSync(join(dir, f), { force: true });
  }

  get path(): string | undefined {
    return this.dir && join(this.dir, HOST_FILE);
  }

  /** From now on every change is written (the state is loaded): a first write now. */
  start(state: HostState): void {
    if (!this.dir) return;
    this.state = state;
    this.on = true;
    this.write(true);
  }

  /** Nothing is written any more (the host is closed: what it tears down stays on disk as it was). */
  stop(): void {
    this.on = false;
  }

  /** Runs `fn` (synchronous: the changes of one step of an operation), then writes the state. */
  change<T>(fn: () => T): T {
    this.depth++;
    let ok = false;
    try {
      const out = fn();
      ok = true;
      return out;
    } finally {
      // (A write that fails while `fn`'s error is on its way would hide it: that one is thrown.)
      if (--this.depth === 0 && this.on) {
        if (ok) this.write(true);
        else this.quietly(() => this.write(true));
      }
    }
  }

  /** A guest's files or processes changed: its text is made again and the file written (inside a change, by it). */
  sandboxChanged(id: string): void {
    if (!this.on) return;
    this.sandboxText.delete(id);
    if (this.depth === 0) this.quietly(() => this.write(false));
  }

  /** What a volume image's filesystem is told: its changes are written, its growth is bounded. */
  volumeWatch(id: string): FsWatch {
    return {
      room: (grow, path) => this.room(grow, path),
      changed: () => {
        if (!this.on) return;
        this.volumeText.delete(id);
        if (this.depth === 0) this.quietly(() => this.write(false));
      },
    };
  }

  /** What a sandbox's root filesystem is told. */
  sandboxWatch(id: string): FsWatch {
    return { room: (grow, path) => this.room(grow, path), changed: () => this.sandboxChanged(id) };
  }

  /** Refuses (`disk_full`) `grow` more bytes of files if the state would not fit in its bound any more. */
  room(grow: number, path: string): void {
    if (!this.on) return;
    // Files are kept in base64.
    if (this.bytes + Math.ceil((grow * 4) / 3) > MAX_STATE_BYTES) {
      throw new DenError("disk_full", `${path}: No space left on device (the in-memory host keeps at most ${mib(MAX_STATE_BYTES)} MiB of state in ${this.path}; it holds ${mib(this.bytes)} MiB)`);
    }
  }

  /** A write that nobody waits on (a guest's change, a failing operation's): its failure is a warning. */
  private quietly(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      process.emitWarning(`the in-memory host's state was not written: ${(e as Error).message}`, "DenMemoryHostWarning");
    }
  }

  /** The whole state as JSON (`all`: every sandbox's and volume's text made again), into the file. */
  private write(all: boolean): void {
    const s = this.state!;
    if (all) {
      this.sandboxText.clear();
      this.volumeText.clear();
    }
    const sandboxes = [...s.boxes.values()].map((b) => {
      let text = this.sandboxText.get(b.id);
      if (text === undefined) {
        const saved: SavedSandbox = {
          id: b.id, state: b.state, template: b.template, shape: b.shape, volumes: b.volumes, network: b.network ?? null, refused: b.refused,
          cpu: { seconds: b.cpu.seconds, since: b.cpu.since ?? null, share: b.cpu.share }, guest: b.guest.image(),
        };
        text = JSON.stringify(saved);
        this.sandboxText.set(b.id, text);
      }
      return text;
    });
    const volumes = s.vols.list().map(({ id, inode }) => {
      let text = this.volumeText.get(id);
      if (text === undefined) {
        text = JSON.stringify({ ...s.vols.serialize(id), inode });
        this.volumeText.set(id, text);
      }
      return text;
    });
    const templates = s.tpl.all().map((t) => {
      let text = this.templateText.get(t);
      if (text === undefined) {
        text = JSON.stringify(t);
        this.templateText.set(t, text);
      }
      return text;
    });
    // Warm snapshots are kept as JSON text already.
    const warm = [...s.warm].map(([id, image]) => `${JSON.stringify(id)}:${image}`);
    const text = `{"format":${JSON.stringify(FORMAT)},"instance":${JSON.stringify(s.instance)},"savedAt":${JSON.stringify(new Date().toISOString())},`
      + `"sandboxes":[${sandboxes.join(",")}],"warm":{${warm.join(",")}},`
      + `"templates":{"versions":[${templates.join(",")}],"current":${JSON.stringify(s.tpl.currents())}},`
      + `"pins":${JSON.stringify(Object.fromEntries(s.pins))},"volumes":{"nextInode":${s.vols.nextInode},"images":[${volumes.join(",")}]}}`;
    const bytes = Buffer.byteLength(text);
    if (bytes > MAX_STATE_BYTES) {
      throw new DenError("disk_full", `the in-memory host's state would be ${mib(bytes)} MiB, over its bound of ${mib(MAX_STATE_BYTES)} MiB: ${this.path} was not written (it holds the state before this change)`);
    }
    const tmp = join(this.dir!, `${HOST_FILE}.${process.pid}.tmp`);
    const fd = openSync(tmp, "w", 0o600);
    try {
      writeSync(fd, text);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, this.path!);
    this.bytes = bytes;
  }
}
