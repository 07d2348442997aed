/**
 * E2B's volume content API (what the client's `Volume` instance calls with its token):
 * `/volumecontent/{volumeID}/dir|path|file`, registered on the envd listener, so guest
 * bytes are served on that origin and never on the API's. Each call runs in a helper VM
 * (VolumeFiles / Volumes): while a sandbox holds the volume read-write (or, for a change,
 * at all) it is a 409 `volume_in_use`, as E2B's own SDK methods are meant for a volume no
 * sandbox mounts.
 */
import type { IncomingMessage } from "node:http";
import { posix } from "node:path";
import { Readable } from "node:stream";
import type { z } from "zod";
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { DenError, e2bVolumes, parseInput, type FileStat } from "@den/protocol";
import { volumePath, type VolumeEntry } from "@den/control-plane";
import { limited } from "../routes/files.js";
import type { E2bVolumes } from "./volumes.js";

/** `updateMetadata`'s JSON body: three numbers. */
const MAX_PATCH_BODY = 4096;

const TYPES: Record<FileStat["type"], e2bVolumes.FileType> = { file: "file", dir: "directory", symlink: "symlink", other: "unknown" };

/** An entry as E2B's VolumeEntryStat (the guest reports one time; it stands for all three). */
export function entryStat(e: VolumeEntry): e2bVolumes.EntryStat {
  const t = new Date(e.stat.mtime_ms).toISOString();
  return {
    name: e.path === "/" ? "/" : posix.basename(e.path), path: e.path, type: TYPES[e.stat.type], size: e.stat.size,
    mode: e.stat.mode & 0o7777, uid: e.stat.uid, gid: e.stat.gid, atime: t, mtime: t, ctime: t,
    ...(e.stat.target !== undefined ? { target: e.stat.target } : {}),
  };
}

function send(reply: FastifyReply, status: number, code: string, message: string): FastifyReply {
  return reply.status(status).type("application/json").send({ code, message } satisfies e2bVolumes.ErrorBody);
}

/** A small JSON body, read by hand (the envd listener parses no bodies), bounded. */
async function readJson(req: IncomingMessage): Promise<unknown> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    n += c.length;
    if (n > MAX_PATCH_BODY) throw new DenError("payload_too_large", `a metadata body is at most ${MAX_PATCH_BODY} bytes`);
    parts.push(c);
  }
  if (!n) return {};
  try {
    return JSON.parse(Buffer.concat(parts).toString("utf8"));
  } catch {
    throw new DenError("invalid_argument", "body: not JSON");
  }
}

type Req = FastifyRequest<{ Params: { volumeID: string } }>;

export function volumeContentRoutes(volumes: E2bVolumes, opts: { maxUploadBytes: number }) {
  const files = volumes.files;
  return async (app: FastifyInstance): Promise<void> => {
    app.setErrorHandler((err: FastifyError | Error, req, reply) => {
      // A body refused before its end: the rest is not read, so the connection cannot carry another request.
      if ((req.method === "PUT" || req.method === "PATCH") && !req.raw.complete) reply.header("connection", "close");
      if (err instanceof DenError) {
        // A server fault says which, not what (its message may name hosts or paths of the host).
        return send(reply, err.status, err.code, err.status < 500 || err.code === "timeout" ? err.message : `internal error (${err.code})`);
      }
      const fe = err as FastifyError;
      if (fe.statusCode && fe.statusCode >= 400 && fe.statusCode < 500) return send(reply, fe.statusCode, "invalid_argument", fe.message);
      req.log.error({ err }, "E2B volume content API failed");
      return send(reply, 500, "internal", "internal error");
    });

    /** The volume the token opens, and the query with its path (all checked before any helper VM starts). */
    const gate = async <S extends z.ZodType<{ path: string }>>(req: Req, schema: S) => {
      const { p, v } = await volumes.authorize(req.params.volumeID, req.headers.authorization);
      const q: z.infer<S> = parseInput(schema, req.query, "query");
      return { p, v, q, path: volumePath(q.path) };
    };

    app.get("/volumecontent/:volumeID/dir", async (req: Req) => {
      const { p, v, q, path } = await gate(req, e2bVolumes.ListQuery);
      return (await files.list(p, v, path, q.depth ?? 1)).map(entryStat);
    });
    app.post("/volumecontent/:volumeID/dir", async (req: Req, reply) => {
      const { p, v, q, path } = await gate(req, e2bVolumes.CreateQuery);
      return reply.status(201).send(entryStat(await files.mkdir(p, v, path, { parents: q.force, uid: q.uid, gid: q.gid, mode: q.mode })));
    });
    app.get("/volumecontent/:volumeID/path", async (req: Req) => {
      const { p, v, path } = await gate(req, e2bVolumes.PathQuery);
      return entryStat(await files.stat(p, v, path));
    });
    app.patch("/volumecontent/:volumeID/path", async (req: Req) => {
      const { p, v, path } = await gate(req, e2bVolumes.PathQuery);
      const meta = parseInput(e2bVolumes.MetadataPatch, await readJson(req.raw), "body");
      return entryStat(await files.setMeta(p, v, path, meta));
    });
    app.delete("/volumecontent/:volumeID/path", async (req: Req, reply) => {
      const { p, v, path } = await gate(req, e2bVolumes.PathQuery);
      await files.remove(p, v, path);
      return reply.status(204).send();
    });

    app.get("/volumecontent/:volumeID/file", async (req: Req, reply) => {
      const { p, v, path } = await gate(req, e2bVolumes.PathQuery);
      const { body, close } = await volumes.readFile(p, v, path);
      // The helper VM goes when the response ends, read to its end or not.
      reply.raw.on("close", () => void close());
      return reply.type("application/octet-stream").headers({
        "x-content-type-options": "nosniff", "content-security-policy": "sandbox", "content-disposition": "attachment", "cache-control": "no-store",
      }).send(Readable.from(body));
    });
    app.put("/volumecontent/:volumeID/file", async (req: Req) => {
      const { p, v, q, path } = await gate(req, e2bVolumes.CreateQuery);
      const limit = opts.maxUploadBytes;
      const declared = Number(req.headers["content-length"] ?? NaN);
      // Refused before a byte is read (and before a helper VM starts for it).
      if (declared > limit) throw new DenError("payload_too_large", `upload of ${declared} bytes exceeds ${limit}`);
      return entryStat(await files.write(p, v, path, limited(req.raw as AsyncIterable<Buffer>, limit), { uid: q.uid, gid: q.gid, mode: q.mode }));
    });
  };
}
