import { existsSync } from "node:fs";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { capAppendLog } from "./console-log.js";
import type { DataDirLayout } from "./data-dir.js";
import { VM_FILES } from "./qemu.js";
import type { Sandbox } from "./sandbox.js";
import { newId } from "./util.js";

/** The sandboxes a runtime holds, by id: the one map every job of the runtime looks them up in. */
export class SandboxRegistry {
  private readonly live = new Map<string, Sandbox>();
  /** QEMU writes its own warnings to qemu.log; a guest must not be able to grow it without bound. */
  private readonly logCapTimer = setInterval(() => {
    for (const s of this.live.values()) capAppendLog(join(s.dir, VM_FILES.log));
  }, 30_000).unref();

  constructor(private readonly layout: DataDirLayout) {}

  has(id: string): boolean {
    return this.live.has(id);
  }

  get(id: string): Sandbox {
    const s = typeof id === "string" ? this.live.get(id) : undefined;
    if (!s) throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(id)} does not exist`);
    return s;
  }

  list(): Sandbox[] {
    return [...this.live.values()];
  }

  add(sbx: Sandbox): void {
    this.live.set(sbx.id, sbx);
  }

  remove(id: string): void {
    this.live.delete(id);
  }

  /** A caller-chosen sandbox id (a control plane records it before the VM exists), or a new one. */
  newId(id?: string): string {
    if (id === undefined) return newId("sbx");
    // (`bld_`: a template build's VM, which the host agent keeps to itself.)
    if (!/^(sbx|bld)_[a-z2-7]{16}$/.test(id)) throw new DenError("invalid_argument", `not a sandbox id: ${JSON.stringify(id)}`);
    if (this.live.has(id) || existsSync(this.layout.sandbox(id))) throw new DenError("already_exists", `sandbox ${id} already exists on this host`);
    return id;
  }

  async destroyAll(): Promise<void> {
    await Promise.all(this.list().map((s) => s.destroy()));
  }

  /** Lets go of every sandbox without stopping its VM (a runtime's close: the next open adopts them). */
  detachAll(): void {
    for (const s of this.live.values()) s.detach();
    this.live.clear();
    clearInterval(this.logCapTimer);
  }
}
