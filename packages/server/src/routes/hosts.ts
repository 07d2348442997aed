import { z } from "zod";
import { DenError, api, host } from "@den/protocol";
import { hasSecret } from "@den/host-agent";
import type { TypedApp } from "../typed-app.js";
import { requireAdmin } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";

const HostParams = z.object({ id: z.string().min(1).max(128) });

/**
 * The deployment's host agents: the admin's view (`/v1/hosts`: list, drain, remove) and the
 * hosts' own calls (`/internal/v1/hosts`: heartbeats and a stopping host's drain), which
 * carry the deployment's host secret instead of an API key and are left out of the
 * OpenAPI document (they are the host protocol's, HOST-PROTOCOL.md).
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

  const secret = cp.config.hostAgent.kind === "remote" ? cp.config.hostAgent.secret : undefined;
  const hostOnly = async (req: { headers: { authorization?: string } }) => {
    // Over mutual TLS the hosts call the fleet listener (DEN_FLEET_PORT), never this one.
    if (cp.config.fleet) throw new DenError("route_not_found", "hosts call this control plane on its hosts' port (DEN_FLEET_PORT), over mutual TLS");
    if (!secret) throw new DenError("route_not_found", "this control plane takes no host registrations (it runs its host agent in process)");
    if (!hasSecret(req.headers.authorization, secret)) throw new DenError("unauthorized", "a host agent's call needs the deployment's host secret (DEN_HOST_SECRET)");
  };

  app.post(host.registration.heartbeat.path, {
    schema: { hide: true, body: host.Heartbeat, response: { 200: host.HeartbeatReply } },
    onRequest: hostOnly,
  }, async (req) => cp.registry.heartbeat(req.body));

  app.post(host.registration.drain.path, {
    schema: { hide: true, params: HostParams, response: { 200: host.registration.drain.response } },
    onRequest: hostOnly,
  }, async (req) => ({ left: await cp.registry.drain(req.params.id) }));
}
