/**
 * Making and unmaking the in-memory host's VMs: a sandbox from a guest image (a template's,
 * a snapshot's, a parent's), its volumes in their slots; the hooks through which its guest
 * asks the host what it may do now; a fresh boot; its end; and one put back as the state
 * file kept it.
 */
import { randomUUID } from "node:crypto";
import { DenError, type host } from "@den/protocol";
import type { TestControls } from "./host-controls.js";
import type { SavedSandbox } from "./host-file.js";
import type { CallFrame } from "./host-frame.js";
import { MIB, SANDBOX_ID, type HostState, type MemorySandbox, type Shape } from "./host-state.js";
import { MemoryFs, deserializeDir, type Filesystem } from "./memory-fs.js";
import { MemoryGuest, type GuestHooks, type GuestImage } from "./memory-guest.js";
import { BOOT_ID_DIR, type TemplateRef } from "./memory-templates.js";

const ROOT = { uid: 0, gid: 0 };

export class Sandboxes {
  constructor(private readonly state: HostState, private readonly frame: CallFrame, private readonly controls: TestControls) {}

  private hooks(s: MemorySandbox): GuestHooks {
    return {
      enter: async (call) => {
        this.frame.reachable(call);
        await this.frame.faults.enter(call);
        this.state.usable(s);
      },
      reachable: () => {
        this.frame.reachable("guest");
        this.state.usable(s);
      },
      scripted: (command, opts) => this.controls.scripted(command, opts, s.id),
      listener: (port) => this.controls.listener(s.id, port),
      ports: () => this.controls.ports(s.id),
      now: () => this.state.clock.now(),
      shape: () => s.shape,
      cpuShare: () => (s.state === "running" ? s.cpu.share : 0),
      changed: () => {
        if (this.state.boxes.get(s.id) === s) this.state.file.sandboxChanged(s.id);
      },
    };
  }

  /** A new running sandbox `id` from a guest image, its volumes mounted. */
  make(id: string, template: TemplateRef, shape: Shape, image: GuestImage, volumes: host.VolumeSpec[] = []): MemorySandbox {
    if (!SANDBOX_ID.test(id)) throw new DenError("invalid_argument", `not a sandbox id: ${JSON.stringify(id)}`);
    if (this.state.boxes.has(id)) throw new DenError("already_exists", `sandbox ${id} already exists on this host`);
    return this.state.change(() => this.build(id, template, shape, image, volumes));
  }

  /** Sandbox `id` as the state file kept it (its volumes' images are back already). */
  adopt(saved: SavedSandbox): void {
    const volumes = saved.volumes.filter((v) => this.state.vols.has(v.volume));
    const s = this.build(saved.id, saved.template, saved.shape, saved.guest, volumes);
    Object.assign(s, {
      state: saved.state, network: saved.network ?? undefined, refused: saved.refused,
      cpu: { seconds: saved.cpu.seconds, since: saved.cpu.since ?? undefined, share: saved.cpu.share },
    });
  }

  private build(id: string, template: TemplateRef, shape: Shape, image: GuestImage, volumes: host.VolumeSpec[]): MemorySandbox {
    const root: Filesystem = { root: deserializeDir(image.files), limitBytes: shape.diskMb * MIB };
    const fs = new MemoryFs(root, () => this.state.clock.now());
    for (const v of volumes) fs.mount(v.path, this.state.vols.get(v.volume).fs, v.readOnly);
    // Watched once it is made: its files are in the state file, and bounded by it.
    root.watch = this.state.file.sandboxWatch(id);
    const s: MemorySandbox = {
      id, template, shape, state: "running", destroyed: false, fs, guest: undefined as unknown as MemoryGuest, volumes: [...volumes], network: undefined,
      refused: { private: 0, policy: 0, limit: 0, dns: 0 }, cpu: { seconds: 0, since: this.state.clock.now(), share: 0 },
    };
    s.guest = new MemoryGuest(fs, this.hooks(s), image);
    this.state.boxes.set(id, s);
    return s;
  }

  /** A fresh boot of an `off` sandbox: the same files, no process. */
  boot(s: MemorySandbox): void {
    this.state.change(() => {
      s.fs.mkdir(BOOT_ID_DIR, { parents: true, owner: ROOT, mode: 0o555 });
      s.fs.write(`${BOOT_ID_DIR}/boot_id`, Buffer.from(`${randomUUID()}\n`), { owner: ROOT, mode: 0o444 });
      s.guest = new MemoryGuest(s.fs, this.hooks(s));
      this.state.setState(s, "running");
    });
  }

  /** Its VM goes (nothing if there is none); template versions only it used go with it. */
  destroy(id: string): void {
    const s = this.state.boxes.get(id);
    if (!s) return;
    this.state.change(() => {
      this.state.boxes.delete(id);
      s.destroyed = true;
      s.guest.lose(new DenError("agent_unavailable", "agent connection closed by host"));
      this.state.gc();
    });
  }
}
