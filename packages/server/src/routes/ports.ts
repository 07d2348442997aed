import { DenError, api } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import { principal } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";
import { TOKEN_PARAM } from "../ports/proxy.js";
import { portOrigin, serverBase } from "../ports/origins.js";
import type { PortTokens } from "../ports/tokens.js";
import { IdParams } from "./params.js";

export function registerPortRoutes(app: TypedApp, cp: ControlPlane, tokens: PortTokens): void {
  app.get("/v1/sandboxes/:id/ports", {
    schema: {
      summary: "TCP ports listening inside the sandbox (reach one at /v1/sandboxes/{id}/ports/{port}/...)",
      description: "Any port is reachable through Den whether it is listed or not, with the owner's key or a signed URL; HTTP, WebSockets, and raw TCP with `Upgrade: den-tcp` on /v1/sandboxes/{id}/ports/{port}. A request to a hibernated sandbox's port wakes it.",
      params: IdParams, response: { 200: api.ListPortsResponse },
    },
  }, async (req) => {
    const row = await cp.owned(principal(req), req.params.id);
    if (row.state !== "running") return { ports: [], state: row.state as api.SandboxState };
    const ports = await cp.guests.peek(row).listeningPorts();
    return { ports, state: row.state as api.SandboxState };
  });

  app.post("/v1/sandboxes/:id/urls", {
    schema: { summary: "A signed URL to one port, for browsers and anyone without a key", params: IdParams, body: api.CreatePortUrlRequest, response: { 201: api.PortUrl } },
  }, async (req, reply) => {
    const row = await cp.owned(principal(req), req.params.id);
    const ttl = req.body.expires_in_seconds ?? 3600;
    const max = cp.config.ports.maxUrlTtlSeconds;
    if (ttl > max) throw new DenError("invalid_argument", `expires_in_seconds: at most ${max} on this server`);
    const expires = Date.now() + ttl * 1000;
    const token = tokens.sign(row.id, req.body.port, expires);
    // The URL to hand out is the port's own origin; the path route sends a browser there.
    const origin = portOrigin(cp.config, req.headers.host, row.id, req.body.port);
    origin.searchParams.set(TOKEN_PARAM, token);
    const path = new URL(`/v1/sandboxes/${row.id}/ports/${req.body.port}/`, serverBase(cp.config, req.headers.host));
    path.searchParams.set(TOKEN_PARAM, token);
    return reply.status(201).send({
      port: req.body.port, url: origin.toString(), vhost_url: origin.toString(), path_url: path.toString(), token,
      expires_at: new Date(Math.floor(expires / 1000) * 1000).toISOString(),
    });
  });
}
