import type { FastifyInstance, FastifyReply } from "fastify";
import { DenError } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import { bearerKey } from "@den/control-plane";

/**
 * Liveness, readiness and Prometheus metrics, outside /v1 (probes and scrapers). Metrics
 * take an admin key (`Authorization: Bearer`, as Prometheus' `authorization` setting
 * sends it) unless `DEN_METRICS_PUBLIC=1`.
 */
export function registerHealthRoutes(app: FastifyInstance, cp: ControlPlane): void {
  app.get("/healthz", { schema: { hide: true } }, async () => ({ ok: true }));

  app.get("/readyz", { schema: { hide: true } }, async (_req, reply: FastifyReply) => {
    const checks: Record<string, string> = {};
    try {
      await cp.keys.readable();
      checks.database = "ok";
    } catch (e) {
      checks.database = (e as Error).message;
    }
    try {
      const want = cp.config.defaults.template;
      checks.template = (await cp.templates.hostTemplates()).some((t) => t.name === want && t.current) ? "ok" : `default template ${want} is not built`;
    } catch (e) {
      checks.template = (e as Error).message;
    }
    const ok = Object.values(checks).every((v) => v === "ok");
    return reply.status(ok ? 200 : 503).send({ ok, checks });
  });

  app.get("/metrics", { schema: { hide: true } }, async (req, reply) => {
    if (!cp.config.metricsPublic) {
      const p = await cp.keys.principal(bearerKey(req.headers.authorization));
      if (!p) throw new DenError("unauthorized", "metrics need an admin key (Authorization: Bearer <key>), or DEN_METRICS_PUBLIC=1");
      if (!p.admin) throw new DenError("forbidden", "metrics need an admin key");
    }
    return reply.type(cp.metrics.registry.contentType).send(await cp.metrics.registry.metrics());
  });
}
