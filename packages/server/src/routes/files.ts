import { Readable } from "node:stream";
import { z } from "zod";
import { DenError, api } from "@den/protocol";
import type { DirEntry, FileStat as GuestStat } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import { principal } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";
import { IdParams } from "./params.js";

const PathQuery = z.object({ path: api.GuestPath });

function stat(path: string, s: GuestStat | DirEntry): api.FileStat {
  return {
    path, type: s.type, size: s.size, mode: s.mode, mtime: new Date(s.mtime_ms).toISOString(),
    ...("target" in s && s.target !== undefined ? { target: s.target } : {}),
  };
}

/** Counts bytes through an upload and fails it past `limit`, so no client can fill the guest's disk through us unbounded. */
export async function* limited(source: AsyncIterable<Buffer>, limit: number): AsyncGenerator<Buffer> {
  let total = 0;
  for await (const chunk of source) {
    total += chunk.length;
    if (total > limit) throw new DenError("payload_too_large", `upload exceeds ${limit} bytes`);
    yield chunk;
  }
}

/** A raw upload's body as chunks: the request stream itself (octet-stream), or what another parser made of it. */
export function bodySource(body: unknown): AsyncIterable<Buffer> {
  return body && typeof body === "object" && Symbol.asyncIterator in body ? (body as AsyncIterable<Buffer>)
    : (async function* () { if (body !== undefined) yield Buffer.from(typeof body === "string" ? body : JSON.stringify(body)); })();
}

export function registerFileRoutes(app: TypedApp, cp: ControlPlane): void {
  app.get("/v1/sandboxes/:id/files", {
    schema: { summary: "Download a file's bytes", params: IdParams, querystring: PathQuery },
  }, async (req, reply) => {
    const { guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    const it = guest.files.readStream(req.query.path);
    // Pull the first chunk before the headers go out, so a missing file is a clean 404.
    const first = await it.next();
    async function* body(): AsyncGenerator<Buffer> {
      if (!first.done) yield first.value;
      yield* it;
    }
    // Guest bytes on the API's origin: never rendered, sniffed or run here.
    return reply.type("application/octet-stream").headers({
      "x-content-type-options": "nosniff", "content-security-policy": "sandbox", "content-disposition": "attachment", "cache-control": "no-store",
    }).send(Readable.from(body()));
  });

  app.put("/v1/sandboxes/:id/files", {
    schema: { summary: "Upload a file (raw bytes, application/octet-stream); atomic in the guest", params: IdParams, querystring: PathQuery, response: { 200: api.FileStat } },
  }, async (req) => {
    const row = await cp.owned(principal(req), req.params.id);
    const declared = Number(req.headers["content-length"] ?? NaN);
    // Refused before a byte is read: Node then discards the body and the client gets the 413.
    if (declared > cp.config.limits.uploadBytes) throw new DenError("payload_too_large", `upload of ${declared} bytes exceeds ${cp.config.limits.uploadBytes}`);
    const guest = await cp.guests.reach(row.id);
    await guest.files.write(req.query.path, limited(bodySource(req.body), cp.config.limits.uploadBytes));
    return stat(req.query.path, await guest.files.stat(req.query.path));
  });

  app.get("/v1/sandboxes/:id/files/list", {
    schema: { summary: "List a directory", params: IdParams, querystring: PathQuery, response: { 200: api.ListFilesResponse } },
  }, async (req) => {
    const { guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    const r = await guest.files.list(req.query.path);
    const dir = req.query.path.endsWith("/") ? req.query.path : `${req.query.path}/`;
    return { entries: r.entries.map((e) => stat(dir + e.name, e)), truncated: r.truncated };
  });

  app.get("/v1/sandboxes/:id/files/stat", {
    schema: { summary: "Stat a path (does not follow a final symlink)", params: IdParams, querystring: PathQuery, response: { 200: api.FileStat } },
  }, async (req) => {
    const { guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    return stat(req.query.path, await guest.files.stat(req.query.path));
  });

  app.post("/v1/sandboxes/:id/files/mkdir", {
    schema: { summary: "Create a directory", params: IdParams, body: api.MkdirRequest },
  }, async (req, reply) => {
    const { guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    await guest.files.mkdir(req.body.path, { parents: req.body.parents ?? true });
    return reply.status(204).send();
  });

  app.delete("/v1/sandboxes/:id/files", {
    schema: { summary: "Remove a file or directory", params: IdParams, querystring: PathQuery.extend({ recursive: z.enum(["true", "false"]).optional() }) },
  }, async (req, reply) => {
    const { guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    await guest.files.remove(req.query.path, { recursive: req.query.recursive === "true" });
    return reply.status(204).send();
  });

  app.post("/v1/sandboxes/:id/files/rename", {
    schema: { summary: "Rename or move a path", params: IdParams, body: api.RenameRequest },
  }, async (req, reply) => {
    const { guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    await guest.files.rename(req.body.from, req.body.to);
    return reply.status(204).send();
  });
}
