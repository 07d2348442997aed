import { z } from "zod";
import { api } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import { principal } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";
import { IdParams } from "./params.js";
import { toApiCheckpoint, toApiSandbox } from "@den/control-plane";

export function registerCheckpointRoutes(app: TypedApp, cp: ControlPlane): void {
  app.post("/v1/sandboxes/:id/checkpoints", {
    schema: { summary: "Take a durable checkpoint of a running sandbox (kept in the snapshot store)", params: IdParams, body: api.CreateCheckpointRequest.nullish(), response: { 201: api.Checkpoint } },
  }, async (req, reply) => {
    const row = await cp.owned(principal(req), req.params.id);
    return reply.status(201).send(toApiCheckpoint(await cp.checkpoint(principal(req), row.id, req.body?.name)));
  });

  app.post("/v1/sandboxes/:id/fork", {
    schema: { summary: "Fork a running sandbox into independent copy-on-write children", params: IdParams, body: api.ForkRequest.nullish(), response: { 201: api.ForkResponse } },
  }, async (req, reply) => {
    const row = await cp.owned(principal(req), req.params.id);
    return reply.status(201).send({ sandboxes: (await cp.fork(principal(req), row.id, req.body?.count ?? 1, undefined, req.body?.volumes)).map(toApiSandbox) });
  });

  app.get("/v1/sandboxes/:id/recovery", {
    schema: { summary: "For a lost sandbox: the checkpoint it would be recovered from, and its age", params: IdParams, response: { 200: z.object({ recovery: api.RecoveryPoint.nullable() }) } },
  }, async (req) => ({ recovery: await cp.recoveryPoint(await cp.owned(principal(req), req.params.id)) }));

  app.post("/v1/sandboxes/:id/recover", {
    schema: { summary: "Recover a lost sandbox from its newest (or the named) checkpoint, keeping its id", params: IdParams, body: api.RecoverRequest.nullish(), response: { 200: api.Sandbox } },
  }, async (req) => {
    const row = await cp.owned(principal(req), req.params.id);
    return toApiSandbox(await cp.recover(principal(req), row.id, req.body?.checkpoint_id));
  });

  app.get("/v1/checkpoints", {
    schema: {
      summary: "List checkpoints (optionally of one sandbox)",
      querystring: z.object({ sandbox_id: z.string().max(64).optional() }),
      response: { 200: z.object({ checkpoints: z.array(api.Checkpoint) }) },
    },
  }, async (req) => ({ checkpoints: (await cp.listCheckpoints(principal(req), req.query.sandbox_id)).map(toApiCheckpoint) }));

  app.get("/v1/checkpoints/:id", {
    schema: { summary: "Get a checkpoint", params: IdParams, response: { 200: api.Checkpoint } },
  }, async (req) => toApiCheckpoint(await cp.checkpoints.owned(principal(req), req.params.id)));

  app.delete("/v1/checkpoints/:id", {
    schema: { summary: "Delete a checkpoint (sandboxes restored from it are unaffected)", params: IdParams },
  }, async (req, reply) => {
    await cp.checkpoints.delete(principal(req), req.params.id);
    return reply.status(204).send();
  });

  app.post("/v1/checkpoints/:id/restore", {
    schema: { summary: "Create a new sandbox from a checkpoint", params: IdParams, body: api.RestoreCheckpointRequest.nullish(), response: { 201: api.Sandbox } },
  }, async (req, reply) => reply.status(201).send(toApiSandbox(await cp.restoreCheckpoint(principal(req), req.params.id, req.body ?? {}))));
}
