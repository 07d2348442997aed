import { z } from "zod";
import { api } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import { principal } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";
import { toApiWebhook } from "@den/control-plane";

const WebhookParams = z.object({ id: z.string().max(64) });

/** /v1/webhooks: an owner's lifecycle webhooks and their delivery logs. */
export function registerWebhookRoutes(app: TypedApp, cp: ControlPlane): void {
  const w = cp.webhooks;
  app.post("/v1/webhooks", {
    schema: { summary: "Add a webhook; its signing secret is returned once", body: api.CreateWebhookRequest, response: { 201: api.Webhook } },
  }, async (req, reply) => reply.status(201).send(await w.create(principal(req), req.body)));

  app.get("/v1/webhooks", {
    schema: { summary: "List your webhooks (without secrets)", response: { 200: api.ListWebhooksResponse } },
  }, async (req) => ({ webhooks: await w.list(principal(req)) }));

  app.get("/v1/webhooks/:id", {
    schema: { summary: "Get a webhook", params: WebhookParams, response: { 200: api.Webhook } },
  }, async (req) => toApiWebhook(await w.owned(principal(req), req.params.id)));

  app.delete("/v1/webhooks/:id", {
    schema: { summary: "Delete a webhook and its delivery log (pending deliveries are dropped)", params: WebhookParams },
  }, async (req, reply) => {
    await w.delete(principal(req), req.params.id);
    return reply.status(204).send();
  });

  app.get("/v1/webhooks/:id/deliveries", {
    schema: {
      summary: "A webhook's deliveries, newest first",
      params: WebhookParams,
      querystring: z.object({
        status: z.enum(["pending", "delivered", "failed"]).optional(),
        limit: z.coerce.number().int().min(1).max(api.API_LIMITS.maxPageSize).optional(),
        cursor: z.string().max(32).optional(),
      }),
      response: { 200: api.ListWebhookDeliveriesResponse },
    },
  }, async (req) => w.deliveries(principal(req), req.params.id, {
    limit: req.query.limit ?? 50, ...(req.query.status ? { status: req.query.status } : {}), ...(req.query.cursor ? { cursor: req.query.cursor } : {}),
  }));

  app.post("/v1/webhooks/:id/deliveries/:delivery/redeliver", {
    schema: {
      summary: "Send a delivery's message again (same webhook-id), after the rest of its queue",
      params: z.object({ id: z.string().max(64), delivery: z.string().max(64) }),
      response: { 202: api.WebhookDelivery },
    },
  }, async (req, reply) => reply.status(202).send(await w.redeliver(principal(req), req.params.id, req.params.delivery)));
}
