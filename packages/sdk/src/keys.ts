/** API keys (admin routes: the calling key must be an admin key). */
import { api } from "@den/protocol";
import { DenClient, type DenClientOptions, type RequestOptions, listOf, seg } from "./client.js";
import { type ApiKeyInfo, type WireInput, toApiKeyInfo } from "./types.js";

/**
 * Options of {@link Keys.create}.
 *
 * @example
 * ```ts
 * const opts: CreateKeyOptions = { owner: "team-a", admin: false };
 * ```
 */
export interface CreateKeyOptions extends DenClientOptions, RequestOptions {
  /** Who the key belongs to: its sandboxes are visible to every key of the same owner. */
  owner: string;
  /** Whether the new key may manage keys. */
  admin?: boolean;
  /**
   * The secret's form: `"den"` (default, `den_...`) or `"e2b"` (`e2b_` + hex digits, the
   * form E2B's Python client accepts). Either works everywhere a Den key does.
   */
  format?: "den" | "e2b";
}

/**
 * Managing API keys (needs an admin key; others get {@link ForbiddenError}).
 *
 * @example
 * ```ts
 * const { id, key } = await Keys.create({ owner: "ci" });
 * // hand `key` to CI; it is never shown again
 * await Keys.revoke(id);
 * ```
 */
export const Keys = {
  /**
   * Creates a key. The answer's `key` is the secret, shown only this once.
   *
   * @example
   * ```ts
   * const created = await Keys.create({ owner: "agent-fleet" });
   * console.log(created.key);
   * ```
   */
  async create(opts: CreateKeyOptions): Promise<ApiKeyInfo> {
    const client = new DenClient(opts);
    const body: WireInput<typeof api.CreateKeyRequest> = { owner: opts.owner };
    if (opts.admin !== undefined) body.admin = opts.admin;
    if (opts.format !== undefined) body.format = opts.format;
    return toApiKeyInfo(await client.json({ method: "POST", path: "/v1/keys", json: body, signal: opts.signal }, api.ApiKey.parse));
  },

  /**
   * Every key (without secrets), revoked ones included.
   *
   * @example
   * ```ts
   * const active = (await Keys.list()).filter((k) => k.revokedAt === null);
   * ```
   */
  async list(opts: DenClientOptions & RequestOptions = {}): Promise<ApiKeyInfo[]> {
    const client = new DenClient(opts);
    const list = await client.json({ method: "GET", path: "/v1/keys", signal: opts.signal }, listOf("keys", api.ApiKey.parse));
    return list.map(toApiKeyInfo);
  },

  /**
   * Revokes a key; requests with it then get 401. Resolves with the revoked key.
   *
   * @example
   * ```ts
   * const k = await Keys.revoke("key_123");
   * console.log(k.revokedAt);
   * ```
   */
  async revoke(id: string, opts: DenClientOptions & RequestOptions = {}): Promise<ApiKeyInfo> {
    const client = new DenClient(opts);
    return toApiKeyInfo(await client.json({ method: "DELETE", path: `/v1/keys/${seg(id)}`, signal: opts.signal }, api.ApiKey.parse));
  },
};
