import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import { DenError, api, e2bApi } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import { bearerKey, type Principal } from "@den/control-plane";
import { useE2bErrors } from "./errors.js";
import type { E2bMapper } from "./mapping.js";
import type { MetricsSeries } from "./metrics.js";
import type { E2bService } from "./service.js";
import { registerE2bTemplateRoutes, type E2bTemplates } from "./templates/routes.js";
import { registerE2bUploads, type UploadLinks } from "./templates/uploads.js";
import { registerE2bVolumeRoutes } from "./volume-routes.js";
import type { E2bVolumes } from "./volumes.js";

declare module "fastify" {
  interface FastifyRequest {
    e2bPrincipal?: Principal;
  }
}

const Id = z.object({ sandboxID: z.string().max(128) });
/** Repeated (`state=a&state=b`) or comma-separated. */
const States = z.preprocess((v) => (v === undefined ? undefined : [v].flat().flatMap((s) => String(s).split(",")).filter(Boolean)), z.array(e2bApi.SandboxState).max(2).optional());
const Limit = z.coerce.number().int().min(1).max(e2bApi.PAGE_MAX).optional();
/** E2B's routes are documented in E2B-API.md, not in Den's OpenAPI document. */
const hide = { hide: true } as const;

/** `metadata=k%3Dv%26k2%3Dv2`: pairs whose keys and values the client encoded once more. */
function metadataQuery(raw: string | undefined): Record<string, string> {
  if (!raw) return {};
  const out: Record<string, string> = {};
  try {
    for (const [k, v] of new URLSearchParams(raw)) out[decodeURIComponent(k)] = decodeURIComponent(v);
  } catch {
    throw new DenError("invalid_argument", "metadata: not a URL-encoded query of key=value pairs");
  }
  if (Object.keys(out).length > api.API_LIMITS.maxMetadataKeys) throw new DenError("invalid_argument", `metadata: at most ${api.API_LIMITS.maxMetadataKeys} filters`);
  return out;
}

const who = (req: FastifyRequest): Principal => {
  if (!req.e2bPrincipal) throw new DenError("unauthorized", "missing API key (X-API-KEY)");
  return req.e2bPrincipal;
};

/**
 * The E2B control-plane API at the root of Den's origin (its paths never collide with /v1
 * or the dashboard): thin routes that check E2B's bodies, call E2bService (volumes:
 * volume-routes.ts, E2bVolumes; templates: templates/), and answer in E2B's shapes, with E2B's error body
 * `{code: <status>, message}` (the client reads `code`).
 */
export async function registerE2bRoutes(root: FastifyInstance, deps: {
  cp: ControlPlane; service: E2bService; mapper: E2bMapper; metrics: MetricsSeries; volumes: E2bVolumes; templates: E2bTemplates; uploads: { links: UploadLinks };
}): Promise<void> {
  const { cp, service, mapper, metrics, volumes, templates } = deps;
  await root.register(async (plain) => {
    const app = plain.withTypeProvider<ZodTypeProvider>();
    useE2bErrors(plain);
    app.addHook("onRequest", async (req) => {
      const key = (req.headers["x-api-key"] as string | undefined) ?? bearerKey(req.headers.authorization);
      const p = await cp.keys.principal(key);
      if (!p) throw new DenError("unauthorized", key ? "invalid or revoked API key" : "missing API key (X-API-KEY)");
      req.e2bPrincipal = p;
    });

    const create = async (req: FastifyRequest<{ Body: e2bApi.NewSandbox }>, reply: FastifyReply) => {
      const { row, templateId } = await service.create(who(req), req.body);
      return reply.status(201).send(mapper.sandbox(row, templateId));
    };
    app.post("/v2/sandboxes", { schema: { ...hide, body: e2bApi.NewSandbox } }, create);
    app.post("/sandboxes", { schema: { ...hide, body: e2bApi.NewSandbox } }, create);

    const connect = async (req: FastifyRequest<{ Params: { sandboxID: string }; Body: e2bApi.ConnectSandbox | undefined }>, reply: FastifyReply) => {
      const { row, resumed } = await service.connect(who(req), req.params.sandboxID, req.body ?? {});
      return reply.status(resumed ? 201 : 200).send(mapper.sandbox(row));
    };
    app.post("/v2/sandboxes/:sandboxID/connect", { schema: { ...hide, params: Id, body: e2bApi.ConnectSandbox.nullish() } }, connect);
    app.post("/sandboxes/:sandboxID/connect", { schema: { ...hide, params: Id, body: e2bApi.ConnectSandbox.nullish() } }, connect);
    // 2.0-2.6 clients: resume is for paused sandboxes only.
    app.post("/sandboxes/:sandboxID/resume", { schema: { ...hide, params: Id, body: e2bApi.ResumedSandbox.nullish() } }, async (req, reply) => {
      const p = who(req);
      if ((await service.live(p, req.params.sandboxID)).state !== "hibernated") throw new DenError("invalid_state", `sandbox ${req.params.sandboxID} is already running`);
      const { row } = await service.connect(p, req.params.sandboxID, req.body ?? {});
      return reply.status(201).send(mapper.sandbox(row));
    });

    app.get("/v2/sandboxes", {
      schema: { ...hide, querystring: z.object({ state: States, metadata: z.string().max(8192).optional(), template: z.string().max(128).optional(), startedAfter: z.string().max(64).optional(), limit: Limit, nextToken: z.string().max(512).optional(), order: z.enum(["asc", "desc"]).optional() }) },
    }, async (req, reply) => {
      const q = req.query;
      const { rows, next } = await service.list(who(req), {
        metadata: metadataQuery(q.metadata), ...(q.order ? { order: q.order } : {}), ...(q.state ? { states: q.state } : {}), ...(q.template ? { template: q.template } : {}),
        ...(q.startedAfter ? { startedAfter: q.startedAfter } : {}), ...(q.limit ? { limit: q.limit } : {}), ...(q.nextToken ? { nextToken: q.nextToken } : {}),
      });
      if (next) reply.header(e2bApi.NEXT_TOKEN_HEADER, next);
      return rows.map((r) => mapper.listed(r));
    });
    // The list before paging (older clients): running sandboxes.
    app.get("/sandboxes", { schema: { ...hide, querystring: z.object({ metadata: z.string().max(8192).optional() }) } }, async (req) => {
      const { rows } = await service.list(who(req), { states: ["running"], metadata: metadataQuery(req.query.metadata) });
      return rows.map((r) => mapper.listed(r));
    });

    app.get("/sandboxes/:sandboxID", { schema: { ...hide, params: Id } }, async (req) => {
      const row = await service.live(who(req), req.params.sandboxID);
      return mapper.detail(row, await service.volumeMounts(row.id));
    });

    app.delete("/sandboxes/:sandboxID", { schema: { ...hide, params: Id } }, async (req, reply) => {
      if (!(await service.kill(who(req), req.params.sandboxID))) throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(req.params.sandboxID)} does not exist`);
      return reply.status(204).send();
    });

    app.post("/sandboxes/:sandboxID/pause", { schema: { ...hide, params: Id, body: e2bApi.PauseRequest.nullish() } }, async (req, reply) => {
      await service.pause(who(req), req.params.sandboxID, req.body?.memory);
      return reply.status(204).send();
    });

    app.post("/sandboxes/:sandboxID/timeout", { schema: { ...hide, params: Id, body: e2bApi.SetTimeout } }, async (req, reply) => {
      await service.setTimeout(who(req), req.params.sandboxID, req.body.timeout);
      return reply.status(204).send();
    });
    // Keep-alive of older clients: the deadline moves out by `duration` (never in).
    app.post("/sandboxes/:sandboxID/refreshes", { schema: { ...hide, params: Id, body: e2bApi.Refresh.nullish() } }, async (req, reply) => {
      await service.connect(who(req), req.params.sandboxID, { timeout: req.body?.duration ?? 60 });
      return reply.status(204).send();
    });

    app.put("/sandboxes/:sandboxID/network", { schema: { ...hide, params: Id, body: e2bApi.NetworkUpdate } }, async (req, reply) => {
      await service.setNetwork(who(req), req.params.sandboxID, req.body);
      return reply.status(204).send();
    });

    app.post("/sandboxes/:sandboxID/fork", { schema: { ...hide, params: Id, body: e2bApi.ForkRequest.nullish() } }, async (req, reply) => {
      const kids = await service.fork(who(req), req.params.sandboxID, req.body ?? {});
      return reply.status(201).send(kids.map((k) => ({ sandbox: mapper.sandbox(k) })));
    });

    app.post("/sandboxes/:sandboxID/snapshots", { schema: { ...hide, params: Id, body: e2bApi.SnapshotRequest.nullish() } }, async (req, reply) => {
      const c = await service.snapshot(who(req), req.params.sandboxID, req.body?.name);
      return reply.status(201).send({ snapshotID: c.id, names: c.name ? [c.name] : [] });
    });
    app.get("/snapshots", {
      schema: { ...hide, querystring: z.object({ sandboxID: z.string().max(128).optional(), name: z.string().max(256).optional(), limit: Limit, nextToken: z.string().max(128).optional() }) },
    }, async (req, reply) => {
      const q = req.query;
      const { rows, next } = await service.listSnapshots(who(req), {
        ...(q.sandboxID ? { sandboxId: q.sandboxID } : {}), ...(q.name ? { name: q.name } : {}), ...(q.limit ? { limit: q.limit } : {}), ...(q.nextToken ? { nextToken: q.nextToken } : {}),
      });
      if (next) reply.header(e2bApi.NEXT_TOKEN_HEADER, next);
      return rows.map((c) => ({ snapshotID: c.id, names: c.name ? [c.name] : [] }));
    });
    app.delete("/templates/:templateID", { schema: { ...hide, params: z.object({ templateID: z.string().max(128) }) } }, async (req, reply) => {
      if (!(await service.deleteSnapshotOrTemplate(who(req), req.params.templateID))) throw new DenError("not_found", `snapshot or template ${JSON.stringify(req.params.templateID)} does not exist`);
      return reply.status(204).send();
    });

    app.get("/sandboxes/:sandboxID/metrics", {
      schema: { ...hide, params: Id, querystring: z.object({ start: z.coerce.number().int().optional(), end: z.coerce.number().int().optional() }) },
    }, async (req) => {
      const row = await service.live(who(req), req.params.sandboxID);
      return metrics.range(row.id, req.query.start, req.query.end);
    });
    app.get("/sandboxes/metrics", { schema: { ...hide, querystring: z.object({ sandbox_ids: z.string().max(100 * 40) }) } }, async (req) => {
      const p = who(req);
      const ids = req.query.sandbox_ids.split(",").filter(Boolean).slice(0, 100);
      const mine = (await cp.store.sandboxes.byIds(ids)).filter((r) => r.owner === p.owner).map((r) => r.id);
      return { sandboxes: metrics.latest(mine) };
    });

    registerE2bVolumeRoutes(app, volumes, who);
    registerE2bTemplateRoutes(app, cp, templates, who);
  });
  // The upload links' target: a scope of its own, without the API key (the link's token is the authority).
  await registerE2bUploads(root, { cp, ...deps.uploads });
}
