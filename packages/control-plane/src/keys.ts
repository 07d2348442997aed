import type { api } from "@den/protocol";
import { newKeySecret, type Principal, type Store } from "./db/store.js";

/** The longest key looked up (longer ones are no key: a lookup hashes what it is given). */
const MAX_KEY = 512;

/**
 * API keys: who a caller is, and the admin's keys. Every surface (/v1, E2B REST, envd, the
 * port proxy, health) asks here; none reads the keys' table itself.
 */
export class Keys {
  constructor(private readonly store: Store) {}

  /** The caller a key belongs to, if it is a live key. */
  async principal(secret: string | undefined): Promise<Principal | undefined> {
    if (!secret || secret.length > MAX_KEY) return undefined;
    return this.store.keys.find(secret);
  }

  /** Whether `secret` is a live key of `owner`. */
  async isOwners(secret: string, owner: string): Promise<boolean> {
    return (await this.principal(secret))?.owner === owner;
  }

  async create(owner: string, admin: boolean, format: "den" | "e2b" = "den"): Promise<api.ApiKey & { secret: string }> {
    const { id, secret } = await this.store.keys.create(owner, admin, newKeySecret(format));
    const key = (await this.store.keys.list()).find((k) => k.id === id)!;
    return { ...key, secret };
  }

  list(): Promise<api.ApiKey[]> {
    return this.store.keys.list();
  }

  revoke(id: string): Promise<api.ApiKey | undefined> {
    return this.store.keys.revoke(id);
  }

  /** Whether the keys can be read at all (the database answers): health's readiness. */
  async readable(): Promise<void> {
    await this.store.keys.count();
  }

  /**
   * A deployment's first admin key: `given` (DEN_API_KEY) is made a key if it is not one
   * yet; with none given, a key is made and its secret returned to the one replica that
   * made it, when the deployment has none.
   */
  async bootstrap(given: string | undefined): Promise<string | undefined> {
    if (given) {
      await this.store.keys.ensure("admin", true, given);
      return undefined;
    }
    return this.store.keys.firstAdmin();
  }
}
