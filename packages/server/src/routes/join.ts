import { DenError, api, host } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import type { TypedApp } from "../typed-app.js";
import { requireAdmin } from "../principal.js";

/**
 * Machines joining the fleet: an admin's one-time join token (`/v1/hosts/tokens`), and the
 * machine's redemption of it for a certificate (`/internal/v1/join`: no API key, the token is
 * its credential; left out of the OpenAPI document, it is the host protocol's).
 */
export function registerJoinRoutes(app: TypedApp, cp: ControlPlane): void {
  app.post("/v1/hosts/tokens", {
    schema: {
      summary: "Make a one-time token a machine joins the fleet with (`den host run --join TOKEN`): a host's by default, valid an hour; its text is shown only here (admin)",
      body: api.CreateJoinTokenRequest,
      response: { 201: api.JoinToken },
    },
  }, async (req, reply) => {
    const p = requireAdmin(req);
    const t = await cp.enrollment.createToken(p, req.body.kind, req.body.ttl_seconds);
    return reply.status(201).send({ id: t.id, token: t.token, kind: t.kind, expires_at: new Date(t.expiresAt).toISOString() });
  });

  app.post(host.registration.join.path, {
    schema: { hide: true, body: host.JoinRequest, response: { 200: host.JoinReply } },
    onRequest: async () => {
      // With a hosts' listener, machines join there (where they can check its certificate against the token's pin).
      if (cp.config.fleet) throw new DenError("route_not_found", "machines join this control plane on its hosts' port (DEN_FLEET_PORT)");
    },
  }, async (req) => {
    const c = await cp.enrollment.redeem(req.body.token, req.body.csr, req.body.machine_id);
    return { certificate: c.certPem, ca: c.caPem, serial: c.serial, not_after: new Date(c.notAfter).toISOString() };
  });
}
