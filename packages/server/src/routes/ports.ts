import { DenError, api } from "@den/protocol";
import { principal, type TypedApp } from "../app.js";
import type { ControlPlane } from "../control-plane.js";
import { TOKEN_PARAM, vhostName } from "../ports/proxy.js";
import type { PortTokens } from "../ports/tokens.js";
import { IdParams } from "./params.js";

/** host[:port]: a name or IPv4 address (letters, digits, - . _ ~) or a bracketed IPv6 literal. */
const HOST_HEADER = /^(?:[A-Za-z0-9_.~-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/;

/**
 * The Host header, checked before it becomes the base of the URLs we hand out: garbage there
 * ("[::1", "a b", "") is the client's mistake, and "a/b" or "u@h" would parse as another host.
 */
function requestHost(host: string | undefined): string | undefined {
  if (host === undefined) return undefined;
  if (HOST_HEADER.test(host) && URL.canParse(`http://${host}`)) return host;
  throw new DenError("invalid_argument", `malformed Host header ${JSON.stringify(host.slice(0, 256))}`);
}

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
    const ports = await cp.hosts.of(row).guest(row.id).listeningPorts();
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
    // No Host at all (HTTP/1.0): the address we listen on, an IPv6 one in brackets.
    const listen = cp.config.host.includes(":") ? `[${cp.config.host}]` : cp.config.host;
    const base = new URL(cp.config.ports.publicUrl ?? `http://${requestHost(req.headers.host) ?? `${listen}:${cp.config.port}`}`);
    const url = new URL(`/v1/sandboxes/${row.id}/ports/${req.body.port}/`, base);
    url.searchParams.set(TOKEN_PARAM, token);
    const vhost = new URL("/", base);
    vhost.hostname = vhostName(row.id, req.body.port, cp.config.ports.domain);
    vhost.searchParams.set(TOKEN_PARAM, token);
    return reply.status(201).send({ port: req.body.port, url: url.toString(), vhost_url: vhost.toString(), token, expires_at: new Date(Math.floor(expires / 1000) * 1000).toISOString() });
  });
}
