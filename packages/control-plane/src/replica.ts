import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { newId } from "@den/protocol";
import type { Store } from "./db/store.js";
import type { Clock } from "./operations.js";

/** How long a replica's lease, and a lease on a kind of work, last without renewal. */
export const REPLICA_LEASE_MS = 10_000;

/**
 * This control-plane process among the deployment's replicas (any number of `den serve`
 * on one Postgres). Its id is kept in its data dir, so a restarted replica knows the
 * operations it left pending as its own and settles them at once; the operations of a
 * replica whose lease ran out are taken over (compare-and-set on their owner) by another.
 * Work that must run in one place at a time (reaping, metering rolls, the store's garbage
 * collector, hosts' leases, network refusal reports) is done by whoever holds its lease
 * in the `leases` table; when that replica dies another takes the lease once it runs out.
 */
export class Replica {
  private constructor(readonly id: string, private readonly store: Store, private readonly clock: Clock, private readonly leaseMs: number) {}

  static async open(store: Store, clock: Clock, dataDir: string, leaseMs = REPLICA_LEASE_MS): Promise<Replica> {
    const file = join(dataDir, "replica-id");
    if (!existsSync(file)) writeFileSync(file, `${newId("rep")}\n`, { mode: 0o600, flag: "wx" });
    const id = readFileSync(file, "utf8").trim();
    if (!/^rep_[A-Za-z0-9]+$/.test(id)) throw new Error(`${file} does not hold a replica id`);
    const r = new Replica(id, store, clock, leaseMs);
    await r.renew();
    return r;
  }

  async renew(): Promise<void> {
    const now = this.clock.now();
    await this.store.replicas.renew(this.id, now, now + this.leaseMs);
  }

  /** Whether this replica holds (now, and for a lease's length) the lease on `work`. */
  async holds(work: string): Promise<boolean> {
    const now = this.clock.now();
    return this.store.replicas.claimLease(work, this.id, now, now + this.leaseMs);
  }

  /** Replicas alive now (this one included). */
  alive(): Promise<Set<string>> {
    return this.store.replicas.live(this.clock.now());
  }

  /** A clean stop: its leases end now. */
  retire(): Promise<void> {
    return this.store.replicas.retire(this.id);
  }
}
