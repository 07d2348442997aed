import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { Store } from "../store.js";

/**
 * The per-sandbox secrets of the E2B API: the envd access token (every envd request of
 * that sandbox carries it) and the traffic token (its ports, when they are not public).
 * Both are derived from one secret kept in the database, so nothing per sandbox is
 * stored, every control plane of a deployment derives the same ones, and they are handed
 * out again on connect.
 */
export class E2bTokens {
  private constructor(private readonly secret: Buffer) {}

  static async open(store: Store): Promise<E2bTokens> {
    return new E2bTokens(Buffer.from(await store.setting("e2b_token_secret", () => randomBytes(32).toString("base64url")), "base64url"));
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

  /** Constant-time check of a presented token. */
  check(kind: "envd" | "traffic", sandbox: string, presented: string | undefined): boolean {
    if (!presented || presented.length > 256) return false;
    const want = Buffer.from(this.derive(kind, sandbox));
    const got = Buffer.from(presented);
    return got.length === want.length && timingSafeEqual(got, want);
  }
}
