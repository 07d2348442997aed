/**
 * The files of a build's COPY steps, as E2B's client uploads them: `GET
 * /templates/{id}/files/{hash}` hands out a link to `PUT /e2b-uploads/{hash}?token=...` on the
 * API's origin, where the token is an expiry, the owner and an HMAC of owner, hash and
 * expiry under a secret kept in the database (`settings.e2b_upload_secret`). The PUT needs
 * no API key: the link is the authority, as E2B's presigned storage URL is. Its body (a tar,
 * gzip'd or not) is streamed into the owner's build contexts under the files hash, at most
 * DEN_MAX_CONTEXT_MB; the host checks the bytes' own sha256 before it reads them.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { Readable } from "node:stream";
import type { FastifyInstance } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import { DenError, e2bTemplates } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import { useE2bErrors } from "../errors.js";

export const UPLOAD_PATH = "/e2b-uploads";
/** How long an upload link works (the client uploads at once). */
export const UPLOAD_LINK_MS = 3600_000;

const TOKEN = /^(\d{1,12})\.([A-Za-z0-9_-]{1,512})\.([A-Za-z0-9_-]{43})$/;

export class UploadLinks {
  private constructor(private readonly secret: Buffer) {}

  static async open(settings: Pick<ControlPlane, "setting">): Promise<UploadLinks> {
    return new UploadLinks(Buffer.from(await settings.setting("e2b_upload_secret", () => randomBytes(32).toString("base64url")), "base64url"));
  }

  /** The token of an upload of files `hash` by `owner`, valid until `expiresMs`. */
  token(owner: string, hash: string, expiresMs: number): string {
    const exp = Math.floor(expiresMs / 1000);
    return `${exp}.${Buffer.from(owner).toString("base64url")}.${this.mac(owner, hash, exp)}`;
  }

  /** The owner a token lets upload files `hash` at `now`; a missing or expired one is a 401, a forged one (or another hash's) a 403. */
  owner(token: string | undefined, hash: string, now: number): string {
    if (!token) throw new DenError("unauthorized", "an upload needs the link's token (GET /templates/{templateID}/files/{hash} gives the link)");
    const m = token.length <= 700 ? TOKEN.exec(token) : null;
    if (!m) throw new DenError("forbidden", "not an upload token this server gave out");
    const exp = Number(m[1]);
    const owner = Buffer.from(m[2]!, "base64url").toString("utf8");
    const want = Buffer.from(this.mac(owner, hash, exp));
    const got = Buffer.from(m[3]!);
    if (got.length !== want.length || !timingSafeEqual(got, want)) throw new DenError("forbidden", "not an upload token this server gave out for these files");
    if (exp * 1000 <= now) throw new DenError("unauthorized", "the upload link has expired: ask for a new one (GET /templates/{templateID}/files/{hash})");
    return owner;
  }

  private mac(owner: string, hash: string, exp: number): string {
    return createHmac("sha256", this.secret).update(`upload\0${owner}\0${hash}\0${exp}`).digest("base64url");
  }
}

/**
 * `PUT /e2b-uploads/{hash}?token=`: a scope of its own at the API's root (no API key; E2B's
 * error body), taking any content type as a stream (the client sends none).
 */
export async function registerE2bUploads(root: FastifyInstance, deps: { cp: ControlPlane; links: UploadLinks }): Promise<void> {
  const { cp, links } = deps;
  await root.register(async (plain) => {
    const app = plain.withTypeProvider<ZodTypeProvider>();
    useE2bErrors(plain);
    plain.addContentTypeParser("*", (_req, payload, done) => done(null, payload));
    app.put(`${UPLOAD_PATH}/:hash`, {
      schema: { hide: true, params: z.object({ hash: e2bTemplates.FilesHash }), querystring: z.object({ token: z.string().max(1024).optional() }) },
    }, async (req, reply) => {
      const owner = links.owner(req.query.token, req.params.hash, cp.clock.now());
      const max = cp.config.limits.contextBytes;
      if (Number(req.headers["content-length"] ?? NaN) > max) throw new DenError("payload_too_large", `a build's files may be at most ${max} bytes (DEN_MAX_CONTEXT_MB)`);
      if (!(req.body instanceof Readable)) throw new DenError("invalid_argument", "send the files as a tar in the body");
      // Named by E2B's files hash, not by the bytes' digest (recorded beside them and checked by the host).
      await cp.builds.contexts.put(owner, req.params.hash, req.body, max, false);
      return reply.status(200).send();
    });
  });
}
