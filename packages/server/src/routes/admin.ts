import { Readable } from "node:stream";
import { z } from "zod";
import { DenError, api } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import { principal, requireAdmin } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";
import { ndjsonStream } from "../ndjson.js";

const BuildParams = z.object({ id: z.string().min(1).max(64) });

export function registerAdminRoutes(app: TypedApp, cp: ControlPlane): void {
  app.get("/v1/templates", {
    schema: { summary: "Template versions on this host", response: { 200: z.object({ templates: z.array(api.Template) }) } },
  }, async (req) => ({ templates: await cp.templates.list(principal(req)) }));

  app.post("/v1/templates", {
    schema: {
      summary: "Build a template: from a template or checkpoint plus setup commands, an OCI image, or a Dockerfile; captured with its memory",
      body: api.CreateTemplateRequest, response: { 201: api.Template, 202: api.CreateTemplateAccepted },
    },
  }, async (req, reply) => {
    if (req.body.wait === false) {
      const build = await cp.builds.start(principal(req), req.body);
      return reply.status(202).header("den-build-id", build.id).send({ build });
    }
    const { build_id, ...t } = await cp.templates.create(principal(req), req.body);
    return reply.status(201).header("den-build-id", build_id).send(t);
  });

  app.get("/v1/templates/builds", {
    schema: {
      summary: "Your template builds, newest first",
      querystring: z.object({ name: api.TemplateName.optional(), limit: z.coerce.number().int().min(1).max(200).optional() }),
      response: { 200: z.object({ builds: z.array(api.TemplateBuild) }) },
    },
  }, async (req) => ({ builds: await cp.builds.list(principal(req), req.query.name, req.query.limit ?? 50) }));

  app.get("/v1/templates/builds/:id", {
    schema: { summary: "A template build: its state, and what it made or why it failed", params: BuildParams, response: { 200: api.TemplateBuild } },
  }, async (req) => cp.builds.get(principal(req), req.params.id));

  app.post("/v1/templates/builds/:id/cancel", {
    schema: { summary: "Cancel a running template build (it ends `cancelled`, its VMs gone)", params: BuildParams, response: { 200: api.TemplateBuild } },
  }, async (req) => cp.builds.cancel(principal(req), req.params.id));

  app.get("/v1/templates/builds/:id/logs", {
    schema: {
      summary: "A build's log as JSON lines from `offset`; `follow=true` streams it until the build ends",
      params: BuildParams, querystring: z.object({ offset: z.coerce.number().int().min(0).optional(), follow: z.enum(["true", "false"]).optional() }),
    },
  }, async (req, reply) => {
    const p = principal(req);
    const id = req.params.id;
    await cp.builds.get(p, id);
    const follow = req.query.follow === "true";
    async function* lines(): AsyncGenerator<string> {
      let from = req.query.offset ?? 0;
      for (;;) {
        const page = await cp.builds.logs(p, id, from, 1000);
        for (const l of page.lines) yield JSON.stringify(l) + "\n";
        if (page.lines.length) from = page.lines[page.lines.length - 1]!.seq + 1;
        if (page.lines.length === 1000) continue;
        // (A last read after the end: lines the end's own write committed.)
        if (!follow || page.ended) {
          if (follow) for (const l of (await cp.builds.logs(p, id, from, 1000)).lines) yield JSON.stringify(l) + "\n";
          return;
        }
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    return reply.type("application/x-ndjson").header("cache-control", "no-store").send(follow ? ndjsonStream(lines()) : Readable.from(lines()));
  });

  app.put("/v1/templates/contexts/:digest", {
    schema: {
      summary: "Upload a build context (a tar, optionally gzipped, as application/octet-stream) named by its sha256, for a Dockerfile's COPY",
      params: z.object({ digest: z.string().max(80) }), response: { 201: api.BuildContext },
    },
  }, async (req, reply) => {
    const declared = Number(req.headers["content-length"] ?? NaN);
    if (declared > cp.config.limits.contextBytes) throw new DenError("payload_too_large", `a build context may be at most ${cp.config.limits.contextBytes} bytes (DEN_MAX_CONTEXT_MB)`);
    if (!(req.body instanceof Readable)) throw new DenError("invalid_argument", "send the context's bytes as application/octet-stream");
    return reply.status(201).send(await cp.builds.uploadContext(principal(req), req.params.digest, req.body));
  });

  app.delete("/v1/templates/:name", {
    schema: { summary: "Delete a template you built (sandboxes and checkpoints made from it keep working)", params: z.object({ name: api.TemplateName }) },
  }, async (req, reply) => {
    await cp.templates.delete(principal(req), req.params.name);
    return reply.status(204).send();
  });

  app.get("/v1/host", {
    schema: { summary: "This host's capacity and what is in use (admin)", response: { 200: api.HostCapacity } },
  }, async (req) => {
    requireAdmin(req);
    return hostCapacity(cp);
  });

  app.post("/v1/keys", {
    schema: { summary: "Create an API key (admin); the secret is returned once", body: api.CreateKeyRequest, response: { 201: api.ApiKey } },
  }, async (req, reply) => {
    requireAdmin(req);
    const { secret, ...key } = await cp.keys.create(req.body.owner, req.body.admin ?? false, req.body.format ?? "den");
    return reply.status(201).send({ ...key, key: secret });
  });

  app.get("/v1/keys", {
    schema: { summary: "List API keys (admin)", response: { 200: z.object({ keys: z.array(api.ApiKey) }) } },
  }, async (req) => {
    requireAdmin(req);
    return { keys: await cp.keys.list() };
  });

  app.delete("/v1/keys/:id", {
    schema: { summary: "Revoke an API key (admin)", params: z.object({ id: z.string().max(64) }), response: { 200: api.ApiKey } },
  }, async (req) => {
    requireAdmin(req);
    const k = await cp.keys.revoke(req.params.id);
    if (!k) throw new DenError("not_found", `API key ${JSON.stringify(req.params.id)} does not exist`);
    return k;
  });
}

/** The whole deployment's capacity: every reachable host's, added up. */
async function hostCapacity(cp: ControlPlane): Promise<api.HostCapacity> {
  const { capacity, used } = await cp.capacity();
  return {
    capacity: { memory_mb: capacity.memoryMb, vcpus: capacity.vcpus, disk_reserve_mb: capacity.diskReserveMb },
    used: { memory_mb: used.memoryMb, vcpus: used.vcpus, sandboxes: used.sandboxes },
  };
}
