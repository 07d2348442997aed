import type { HostAgent, api } from "@den/protocol";
import { networkOf, type Principal, type SandboxRow } from "./db/store.js";
import { NO_REFUSALS, RefusalTracker, effectivePolicy } from "./network.js";
import { hostOfId, type Ctx } from "./context.js";
import * as setNetworkOp from "./ops/set-network.js";
import type { Serializer } from "./serializer.js";

/** Sandboxes' network policies (kept in their rows) and the attempts their networks refused. */
export class NetworkPolicies {
  private refusals = new RefusalTracker();

  constructor(private readonly ctx: Ctx, private readonly queue: Serializer, private readonly owned: (p: Principal, id: string) => Promise<SandboxRow>) {}

  /**
   * Changes a sandbox's network policy. A running sandbox gets it at once; a hibernated
   * one keeps it for its wake. The policy is written with the intent, so a crash in
   * between converges at start (networks follow the database).
   */
  async set(p: Principal, id: string, req: api.NetworkPolicy): Promise<SandboxRow> {
    const policy = effectivePolicy(req, this.ctx.config.network);
    await this.owned(p, id);
    return this.queue.run(id, () => setNetworkOp.run({ ctx: this.ctx, network: this }, id, policy));
  }

  /** A sandbox's policy, whether its network is up, and the attempts it refused. */
  async status(p: Principal, id: string): Promise<api.NetworkStatus> {
    const row = await this.owned(p, id);
    const refused = row.state === "running" ? await this.ctx.hosts.of(row).vms.networkRefusals(id) : undefined;
    return { policy: networkOf(row), active: refused !== undefined, refused: refused ?? NO_REFUSALS };
  }

  /**
   * Writes what each sandbox's network refused since the last pass as one aggregated
   * `network.refused` event: a port scan costs one row per interval, not one per probe.
   */
  async poll(): Promise<void> {
    for (const { host, inventory } of await this.ctx.hosts.inventories()) for (const vm of inventory.vms) await this.flushOn(host, vm.id);
  }

  async flush(id: string): Promise<void> {
    await this.flushOn(await hostOfId(this.ctx, id).catch(() => undefined), id);
  }

  private async flushOn(host: HostAgent | undefined, id: string): Promise<void> {
    const now = await host?.vms.networkRefusals(id).catch(() => undefined);
    if (!now) {
      this.refusals.forget(id);
      return;
    }
    const d = this.refusals.delta(id, now);
    if (d) await this.ctx.ops.event(id, "network.refused", null, { ...d, total: d.private + d.policy + d.limit + d.dns });
  }

  /**
   * Brings a woken (or recovered, or adopted) sandbox's network back to its policy. A
   * failure leaves the sandbox running without a network and says so in its events.
   */
  async restore(row: SandboxRow): Promise<void> {
    try {
      await this.ctx.hosts.of(row).vms.setNetwork(row.id, networkOf(row));
    } catch (e) {
      await this.ctx.ops.event(row.id, "network.error", "error", { message: (e as Error).message });
    }
  }
}
