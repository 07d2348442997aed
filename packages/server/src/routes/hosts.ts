import { z } from "zod";
import { api } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import { requireAdmin } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";

const HostParams = z.object({ id: z.string().min(1).max(128) });

/**
 * The deployment's host agents: the admin's view (`/v1/hosts`: list, drain, revoke, remove).
 * The hosts' own calls (heartbeats, a stopping host's drain, joins and renewals) go to the
 * hosts' listener over mutual TLS (fleet-listener.ts), never to this API.
 */
export function registerHostRoutes(app: TypedApp, cp: ControlPlane): void {
  app.get("/v1/hosts", {
    schema: { summary: "The host agents sandboxes run on: state, lease, kind, capacity and use (admin)", response: { 200: api.HostList } },
  }, async (req) => {
    requireAdmin(req);
    return { hosts: await cp.hostList() };
  });

  app.post("/v1/hosts/:id/drain", {
    schema: { summary: "Drain a host: no new sandboxes; its own cold-hibernate and its volumes are parked in the store, so they wake on another host; `left`: sandboxes and volumes still on it (admin)", params: HostParams, response: { 202: z.object({ left: z.number().int() }) } },
  }, async (req, reply) => {
    requireAdmin(req);
    return reply.status(202).send({ left: await cp.registry.drain(req.params.id) });
  });

  app.post("/v1/hosts/:id/undrain", {
    schema: { summary: "End a drain: the host takes new sandboxes again (admin)", params: HostParams },
  }, async (req, reply) => {
    requireAdmin(req);
    await cp.registry.undrain(req.params.id);
    return reply.status(204).send();
  });

  app.post("/v1/hosts/:id/revoke", {
    schema: { summary: "Revoke a host: its certificates are refused from now on, no call goes to it, and its sandboxes are recovered elsewhere as a lost host's, after its lease and the grace period; `revoked`: how many certificates (admin)", params: HostParams, response: { 200: z.object({ revoked: z.number().int() }) } },
  }, async (req) => {
    requireAdmin(req);
    return { revoked: await cp.registry.revoke(req.params.id) };
  });

  app.delete("/v1/hosts/:id", {
    schema: { summary: "Remove a host that holds no sandbox (drain it first); its certificates are revoked (admin)", params: HostParams },
  }, async (req, reply) => {
    requireAdmin(req);
    await cp.registry.remove(req.params.id);
    return reply.status(204).send();
  });
}
