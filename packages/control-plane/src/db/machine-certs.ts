import type { Selectable } from "kysely";
import { Repo } from "./repo.js";
import type { MachineCertsTable } from "./schema.js";

export type MachineCertRow = Selectable<MachineCertsTable>;

/** The certificates the deployment's CA issued to machines: what revocation and expiry read. */
export class MachineCertsRepo extends Repo {
  async record(row: Omit<MachineCertRow, "revoked_at">): Promise<void> {
    await this.db.insertInto("machine_certs").values({ ...row, revoked_at: null }).execute();
  }

  async get(serial: string): Promise<MachineCertRow | undefined> {
    return this.db.selectFrom("machine_certs").selectAll().where("serial", "=", serial).executeTakeFirst();
  }

  /** A machine's certificates, newest first. */
  async ofMachine(kind: string, machineId: string): Promise<MachineCertRow[]> {
    return this.db.selectFrom("machine_certs").selectAll().where("kind", "=", kind).where("machine_id", "=", machineId).orderBy("issued_at", "desc").execute();
  }

  /** Whether any certificate of the machine was revoked: a revoked machine gets none again under its id. */
  async revoked(kind: string, machineId: string): Promise<boolean> {
    const r = await this.db.selectFrom("machine_certs").select("serial").where("kind", "=", kind).where("machine_id", "=", machineId).where("revoked_at", "is not", null).executeTakeFirst();
    return r !== undefined;
  }

  /** The latest not_after of each machine of `kind` among its unrevoked certificates. */
  async expiries(kind: string): Promise<Map<string, number>> {
    const rows = await this.db.selectFrom("machine_certs").select(["machine_id", (eb) => eb.fn.max("not_after").as("not_after")])
      .where("kind", "=", kind).where("revoked_at", "is", null).groupBy("machine_id").execute();
    return new Map(rows.map((r) => [r.machine_id, Number(r.not_after)]));
  }

  /** Revokes every certificate of a machine at `now`; how many it revoked. */
  async revoke(kind: string, machineId: string, now: number): Promise<number> {
    const r = await this.db.updateTable("machine_certs").set({ revoked_at: now }).where("kind", "=", kind).where("machine_id", "=", machineId).where("revoked_at", "is", null).executeTakeFirst();
    return Number(r.numUpdatedRows);
  }
}
