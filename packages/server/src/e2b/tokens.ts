import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { ControlPlane } from "@den/control-plane";

const VOLUME_TOKEN_PREFIX = "denvol.";
const VOLUME_TOKEN = /^denvol\.(\d{1,12})\.([A-Za-z0-9_-]{43})$/;

/**
 * The secrets of the E2B API: per sandbox, the envd access token (every envd request of
 * that sandbox carries it) and the traffic token (its ports, when they are not public);
 * per volume, the token of its content API. All are derived from one secret kept in the
 * database, so nothing per sandbox or volume is stored, every control plane of a
 * deployment derives the same ones, and they are handed out again on connect (a volume's
 * on `GET /volumes/{id}`, with a new expiry).
 */
export class E2bTokens {
  private constructor(private readonly secret: Buffer) {}

  static async open(settings: Pick<ControlPlane, "setting">): Promise<E2bTokens> {
    return new E2bTokens(Buffer.from(await settings.setting("e2b_token_secret", () => randomBytes(32).toString("base64url")), "base64url"));
  }

  private derive(kind: "envd" | "traffic", sandbox: string): string {
    return createHmac("sha256", this.secret).update(`${kind}\0${sandbox}`).digest("base64url");
  }

  envd(sandbox: string): string {
    return this.derive("envd", sandbox);
  }

  traffic(sandbox: string): string {
    return this.derive("traffic", sandbox);
  }

  /**
   * A volume's content token (E2B's `VolumeAndToken.token`): an expiry and an HMAC of the
   * volume id, its owner and that expiry, so it opens that one volume, for its owner's
   * volume only, until then. A deleted volume's id is never reused, so its tokens die with it.
   */
  volume(volumeId: string, owner: string, expiresMs: number): string {
    const exp = Math.floor(expiresMs / 1000);
    return `${VOLUME_TOKEN_PREFIX}${exp}.${this.volumeMac(volumeId, owner, exp)}`;
  }

  /** Whether `presented` is a live token of this volume and owner at `now`. */
  checkVolume(presented: string | undefined, volumeId: string, owner: string, now: number): boolean {
    const m = presented && presented.length <= 256 ? VOLUME_TOKEN.exec(presented) : null;
    if (!m) return false;
    const exp = Number(m[1]);
    if (exp * 1000 <= now) return false;
    const want = Buffer.from(this.volumeMac(volumeId, owner, exp));
    const got = Buffer.from(m[2]!);
    return got.length === want.length && timingSafeEqual(got, want);
  }

  private volumeMac(volumeId: string, owner: string, exp: number): string {
    return createHmac("sha256", this.secret).update(`volume\0${volumeId}\0${owner}\0${exp}`).digest("base64url");
  }

  /** Constant-time check of a presented token. */
  check(kind: "envd" | "traffic", sandbox: string, presented: string | undefined): boolean {
    if (!presented || presented.length > 256) return false;
    const want = Buffer.from(this.derive(kind, sandbox));
    const got = Buffer.from(presented);
    return got.length === want.length && timingSafeEqual(got, want);
  }
}
