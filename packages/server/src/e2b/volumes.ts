import { DenError, api, e2bApi, parseInput } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import { VolumeFiles } from "@den/control-plane";
import { volumeStore } from "@den/control-plane";
import { bearerKey, type Principal } from "@den/control-plane";
import type { VolumeRow } from "@den/control-plane";
import type { E2bTokens } from "./tokens.js";

/** E2B's names are letters, digits and hyphens, Den's lower-case: one name either way (E2B lower-cases its secrets' names the same way). */
export const canonicalName = (name: string): string => name.toLowerCase();

/** E2B's `volumeMounts` as Den's: read-write (E2B has no read-only mount), names lower-cased; Den checks the rest. */
export function denMounts(mounts: e2bApi.SandboxVolumeMount[] | undefined): api.VolumeMount[] | undefined {
  return mounts?.length ? mounts.map((m) => ({ name: canonicalName(m.name), path: m.path, read_only: false })) : undefined;
}

/**
 * E2B's volumes onto Den's (the same volumes /v1 has, of the key's owner): `volumeID` is
 * Den's volume id, `name` its name. Create, get and the content API's auth live here; the
 * content operations are VolumeFiles' (a helper VM per call, as /v1's volume files).
 */
export class E2bVolumes {
  readonly files: VolumeFiles;

  constructor(
    private readonly cp: ControlPlane,
    private readonly tokens: E2bTokens,
    /** Where the client sends content requests: `https://api.<domain>` unless E2B_VOLUME_API_URL says otherwise. */
    private readonly domainOf: () => string,
  ) {
    this.files = new VolumeFiles(cp.volumes);
  }

  private withToken(v: { id: string; name: string; owner: string }): e2bApi.VolumeAndToken {
    const expires = this.cp.clock.now() + this.cp.config.e2b.volumeTokenSeconds * 1000;
    return { volumeID: v.id, name: v.name, token: this.tokens.volume(v.id, v.owner, expires), domain: this.domainOf() };
  }

  /** A volume of `DEN_E2B_VOLUME_MB` (E2B's create names no size). */
  async create(p: Principal, b: e2bApi.NewVolume): Promise<e2bApi.VolumeAndToken> {
    const req = parseInput(api.CreateVolumeRequest, { name: canonicalName(b.name), size_mb: this.cp.config.e2b.volumeMb }, "request");
    const v = await this.cp.volumes.create(p, req);
    return this.withToken({ ...v, owner: p.owner });
  }

  async list(p: Principal): Promise<e2bApi.Volume[]> {
    return (await this.cp.volumes.list(p)).map((v) => ({ volumeID: v.id, name: v.name }));
  }

  /** The volume and a fresh token for its content. */
  async info(p: Principal, id: string): Promise<e2bApi.VolumeAndToken> {
    return this.withToken(await this.cp.volumes.ownedById(p, id));
  }

  /** false: no such volume of the caller's (the client's `destroy` answers false); mounted anywhere: 409 `volume_in_use`. */
  async destroy(p: Principal, id: string): Promise<boolean> {
    const v = await this.cp.volumes.ownedById(p, id).catch((e: unknown) => (e instanceof DenError && e.code === "volume_not_found" ? undefined : Promise.reject(e)));
    if (!v) return false;
    await this.cp.volumes.delete(p, v.name);
    return true;
  }

  /** A file of the volume as a stream (see Volumes.readFileOf: `close` when the response ends). */
  readFile(p: Principal, v: VolumeRow, path: string): ReturnType<ControlPlane["volumes"]["readFileOf"]> {
    return this.cp.volumes.readFileOf(p, v, path);
  }

  /**
   * The content API's gate: `Authorization: Bearer <token>` must be a live token of the
   * volume in the path, which names its owner (the principal the call runs as). Without a
   * valid token nothing is said about the volume (401 whether or not it exists).
   */
  async authorize(volumeId: string, authorization: string | undefined): Promise<{ p: Principal; v: VolumeRow }> {
    const token = bearerKey(authorization);
    const v = api.VolumeId.safeParse(volumeId).success ? await volumeStore(this.cp.store).byId(volumeId) : undefined;
    if (!v || !this.tokens.checkVolume(token, v.id, v.owner, this.cp.clock.now())) {
      throw new DenError("unauthorized", token ? "invalid or expired volume token (Volume.connect gets a new one)" : "missing volume token (Authorization: Bearer <VolumeAndToken.token>)");
    }
    if (v.deleted_at !== null || v.state !== "ready") throw new DenError("volume_not_found", `volume ${v.id} does not exist`);
    return { p: { keyId: `volume-token:${v.id}`, owner: v.owner, admin: false }, v };
  }
}
