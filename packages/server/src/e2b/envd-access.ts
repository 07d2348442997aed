import { api } from "@den/protocol";
import type { ControlPlane } from "../control-plane.js";
import { checkCredentials, EnvdUnavailable, type EnvdCredentials, type EnvdSandbox, type EnvdSandboxes } from "./envd/index.js";
import { DEFAULT_TIMEOUT_SECONDS } from "./service.js";
import type { E2bTokens } from "./tokens.js";

/**
 * Den's side of the envd seam: which sandbox a request may use. The sandbox's envd token
 * (or a signed URL made with it, or a Den key of its owner) is the only way in; a paused
 * sandbox wakes if it was made with autoResume, else it answers 502 like a dead one.
 */
export class DenEnvdSandboxes implements EnvdSandboxes {
  constructor(private readonly cp: ControlPlane, private readonly tokens: E2bTokens) {}

  async open(sandboxId: string, credentials: EnvdCredentials, opts: { probe?: boolean } = {}): Promise<EnvdSandbox> {
    const found = api.SandboxId.safeParse(sandboxId).success ? await this.cp.store.getSandbox(sandboxId) : undefined;
    if (!found) throw new EnvdUnavailable(`sandbox ${JSON.stringify(sandboxId.slice(0, 64))} does not exist`);
    await checkCredentials(credentials, this.tokens.envd(found.id), async (key) => (await this.cp.store.findKey(key))?.owner === found.owner);
    let row = found;
    if (row.state === "hibernated" && row.auto_resume === 1 && !row.op_id && !opts.probe) row = await this.cp.wake(row.id, "user", row.run_timeout_seconds ?? DEFAULT_TIMEOUT_SECONDS);
    if (row.state !== "running" || (row.op_id && (row.op_kind === "destroy" || row.op_kind === "hibernate"))) throw new EnvdUnavailable(`sandbox ${row.id} is ${row.state === "hibernated" ? "paused" : row.state}`);
    const id = row.id;
    const defaults = row.defaults ? (JSON.parse(row.defaults) as { cwd?: string; user?: string }) : {};
    return {
      guest: this.cp.hosts.of(row).guest(id),
      env: JSON.parse(row.env) as Record<string, string>,
      ...(defaults.cwd ? { cwd: defaults.cwd } : {}),
      ...(defaults.user ? { user: defaults.user } : {}),
      touch: () => void this.cp.touch(id).catch(() => undefined),
      onGone: (cb) => this.cp.ops.onGone(id, cb),
    };
  }
}
