import { Readable } from "node:stream";
import { z } from "zod";
import { DenError, api } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import { principal } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";
import { bodySource, limited } from "./files.js";

/** `:name` of a volume route: bounded here, checked against the owner's volumes by the service. */
const NameParams = z.object({ name: z.string().max(64) });
const PathQuery = z.object({ path: api.VolumeFilePath });

/** /v1/volumes: an owner's named volumes, and their files without a sandbox. */
export function registerVolumeRoutes(app: TypedApp, cp: ControlPlane): void {
  const v = cp.volumes;
  app.post("/v1/volumes", {
    schema: { summary: "Create a volume (an empty ext4 filesystem of size_mb; it outlives every sandbox that mounts it)", body: api.CreateVolumeRequest, response: { 201: api.Volume } },
  }, async (req, reply) => reply.status(201).send(await v.create(principal(req), req.body)));

  app.get("/v1/volumes", {
    schema: { summary: "List your volumes, with the sandboxes they are mounted in", response: { 200: api.ListVolumesResponse } },
  }, async (req) => ({ volumes: await v.list(principal(req)) }));

  app.get("/v1/volumes/:name", {
    schema: { summary: "Get a volume", params: NameParams, response: { 200: api.Volume } },
  }, async (req) => v.get(principal(req), req.params.name));

  app.delete("/v1/volumes/:name", {
    schema: { summary: "Delete a volume and its data (409 volume_in_use while any sandbox not destroyed mounts it)", params: NameParams },
  }, async (req, reply) => {
    await v.delete(principal(req), req.params.name);
    return reply.status(204).send();
  });

  app.post("/v1/volumes/:name/grow", {
    schema: { summary: "Grow a volume's filesystem to size_mb (409 volume_in_use while a sandbox holds it)", params: NameParams, body: api.GrowVolumeRequest, response: { 200: api.Volume } },
  }, async (req) => v.grow(principal(req), req.params.name, req.body.size_mb));

  app.put("/v1/volumes/:name/files", {
    schema: {
      summary: "Write a file into a volume without a sandbox (raw bytes, application/octet-stream; atomic, parents made; 409 volume_in_use while a sandbox holds it)",
      params: NameParams, querystring: PathQuery, response: { 200: api.FileStat },
    },
  }, async (req) => {
    const limit = cp.config.limits.uploadBytes;
    const declared = Number(req.headers["content-length"] ?? NaN);
    // Refused before a byte is read (and before a helper VM is started for it).
    if (declared > limit) throw new DenError("payload_too_large", `upload of ${declared} bytes exceeds ${limit}`);
    return v.writeFile(principal(req), req.params.name, req.query.path, limited(bodySource(req.body), limit));
  });

  app.get("/v1/volumes/:name/files", {
    schema: { summary: "Read a file of a volume without a sandbox (streamed; 409 volume_in_use while a sandbox holds it read-write)", params: NameParams, querystring: PathQuery },
  }, async (req, reply) => {
    const { body, close } = await v.readFile(principal(req), req.params.name, req.query.path);
    // The helper VM goes when the response ends, read to its end or not.
    reply.raw.on("close", () => void close());
    // Guest bytes on the API's origin: never rendered, sniffed or run here.
    return reply.type("application/octet-stream").headers({
      "x-content-type-options": "nosniff", "content-security-policy": "sandbox", "content-disposition": "attachment", "cache-control": "no-store",
    }).send(Readable.from(body));
  });
}
