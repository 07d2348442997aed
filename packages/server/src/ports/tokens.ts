import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { ControlPlane } from "@den/control-plane";

/**
 * Signed port URLs: a token names one sandbox, one port and an expiry, and carries an
 * HMAC of them under a secret that never leaves the control plane. It is a deployment
 * setting in the database, so a URL signed by one replica opens through any other and
 * stays valid across restarts.
 */
export class PortTokens {
  private constructor(private readonly secret: Buffer) {}

  static async open(settings: Pick<ControlPlane, "setting">, dataDir: string): Promise<PortTokens> {
    // A data dir from before the secret moved to the database keeps its URLs valid.
    const file = join(dataDir, "url-secret");
    const legacy = existsSync(file) ? readFileSync(file, "utf8").trim() : undefined;
    const hex = await settings.setting("port_url_secret", () => (legacy && /^[0-9a-f]{64}$/.test(legacy) ? legacy : randomBytes(32).toString("hex")));
    if (!/^[0-9a-f]{64}$/.test(hex)) throw new Error("the port_url_secret setting is not a 32-byte hex secret");
    return new PortTokens(Buffer.from(hex, "hex"));
  }

  private mac(sandbox: string, port: number, expires: number): string {
    return createHmac("sha256", this.secret).update(`den-port:${sandbox}:${port}:${expires}`).digest("base64url");
  }

  /** A token for `sandbox`'s `port`, valid until `expires` (ms since the epoch). */
  sign(sandbox: string, port: number, expires: number): string {
    return `${Math.floor(expires / 1000)}.${this.mac(sandbox, port, Math.floor(expires / 1000))}`;
  }

  /** Whether `token` opens `sandbox`'s `port` at `now`. */
  verify(token: string, sandbox: string, port: number, now: number): boolean {
    const m = /^(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(token);
    if (!m) return false;
    const expires = Number(m[1]);
    if (expires * 1000 <= now) return false;
    const want = Buffer.from(this.mac(sandbox, port, expires));
    const got = Buffer.from(m[2]!);
    return want.length === got.length && timingSafeEqual(want, got);
  }
}
