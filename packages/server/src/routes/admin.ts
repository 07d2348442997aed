import { z } from "zod";
import { DenError, api } from "@den/protocol";
import { principal, requireAdmin, type TypedApp } from "../app.js";
import type { ControlPlane } from "../control-plane.js";

export function registerAdminRoutes(app: TypedApp, cp: ControlPlane): void {
  app.get("/v1/templates", {
    schema: { summary: "Template versions on this host", response: { 200: z.object({ templates: z.array(api.Template) }) } },
  }, async (req) => ({ templates: await cp.listTemplates(principal(req)) }));

  app.post("/v1/templates", {
    schema: {
      summary: "Build a template: a source (template or checkpoint) plus setup commands, captured with its memory",
      body: api.CreateTemplateRequest, response: { 201: api.Template },
    },
  }, async (req, reply) => reply.status(201).send(await cp.createTemplate(principal(req), req.body)));

  app.delete("/v1/templates/:name", {
    schema: { summary: "Delete a template you built (sandboxes and checkpoints made from it keep working)", params: z.object({ name: api.TemplateName }) },
  }, async (req, reply) => {
    await cp.deleteTemplate(principal(req), req.params.name);
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
    const { id, secret } = await cp.store.createKey(req.body.owner, req.body.admin ?? false);
    const key = (await cp.store.listKeys()).find((k) => k.id === id)!;
    return reply.status(201).send({ ...key, key: secret });
  });

  app.get("/v1/keys", {
    schema: { summary: "List API keys (admin)", response: { 200: z.object({ keys: z.array(api.ApiKey) }) } },
  }, async (req) => {
    requireAdmin(req);
    return { keys: await cp.store.listKeys() };
  });

  app.delete("/v1/keys/:id", {
    schema: { summary: "Revoke an API key (admin)", params: z.object({ id: z.string().max(64) }), response: { 200: api.ApiKey } },
  }, async (req) => {
    requireAdmin(req);
    const k = await cp.store.revokeKey(req.params.id);
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
