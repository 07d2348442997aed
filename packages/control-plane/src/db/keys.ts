import type { api } from "@den/protocol";
import { randomBytes } from "node:crypto";
import { newKeySecret, hashKey, iso, type Principal } from "./rows.js";
import { Repo } from "./repo.js";

/** API keys, kept by their hash. */
export class KeysRepo extends Repo {
  async create(owner: string, admin: boolean, secret = newKeySecret()): Promise<{ id: string; secret: string }> {
    const id = `key_${randomBytes(8).toString("hex")}`;
    await this.insert(id, owner, admin, secret).execute();
    return { id, secret };
  }

  private insert(id: string, owner: string, admin: boolean, secret: string) {
    return this.db.insertInto("api_keys").values({ id, owner, hash: hashKey(secret), admin: admin ? 1 : 0, created_at: Date.now(), revoked_at: null });
  }

  /**
   * Makes `secret` a key unless it is one already (DEN_API_KEY): replicas started together
   * with the same key both get here, and the second's insert does nothing rather than fail
   * on the unique hash.
   */
  async ensure(owner: string, admin: boolean, secret: string): Promise<void> {
    await this.insert(`key_${randomBytes(8).toString("hex")}`, owner, admin, secret).onConflict((oc) => oc.column("hash").doNothing()).execute();
  }

  /**
   * Creates the first admin key if the deployment has no key and none was ever made this
   * way; returns its secret to the one process that made it (replicas may start at once:
   * the claim is a settings row, so only one of them wins).
   */
  async firstAdmin(): Promise<string | undefined> {
    if ((await this.count()) > 0) return undefined;
    const secret = newKeySecret();
    return this.transaction(async (s) => {
      const claim = await s.db.insertInto("settings").values({ key: "first_admin_key", value: hashKey(secret) }).onConflict((oc) => oc.column("key").doNothing()).executeTakeFirst();
      if (Number(claim.numInsertedOrUpdatedRows ?? 0) !== 1) return undefined;
      await s.create("admin", true, secret);
      return secret;
    });
  }

  async find(secret: string): Promise<Principal | undefined> {
    const row = await this.db.selectFrom("api_keys").selectAll().where("hash", "=", hashKey(secret)).where("revoked_at", "is", null).executeTakeFirst();
    return row ? { keyId: row.id, owner: row.owner, admin: row.admin === 1 } : undefined;
  }

  async count(): Promise<number> {
    const r = await this.db.selectFrom("api_keys").select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async list(): Promise<api.ApiKey[]> {
    const rows = await this.db.selectFrom("api_keys").selectAll().orderBy("created_at").execute();
    return rows.map((r) => ({ id: r.id, owner: r.owner, admin: r.admin === 1, created_at: iso(r.created_at)!, revoked_at: iso(r.revoked_at) }));
  }

  async revoke(id: string): Promise<api.ApiKey | undefined> {
    await this.db.updateTable("api_keys").set({ revoked_at: Date.now() }).where("id", "=", id).where("revoked_at", "is", null).execute();
    return (await this.list()).find((k) => k.id === id);
  }
}
