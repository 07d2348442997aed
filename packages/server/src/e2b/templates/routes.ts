/**
 * E2B's template routes (the `Template` builder's calls and the template lookups), in the
 * E2B scope of routes.ts: its API key, its error body. Thin: bodies are checked with E2B's
 * schemas (`e2bTemplates`), the work is E2bTemplateBuilds' and E2bTemplateCatalog's. The
 * uploads the file links point at are uploads.ts' own scope (no API key).
 */
import type { FastifyRequest } from "fastify";
import { z } from "zod";
import { DenError, e2bApi, e2bTemplates } from "@den/protocol";
import type { TypedApp } from "../../typed-app.js";
import { serverBase } from "../../ports/origins.js";
import type { ControlPlane } from "@den/control-plane";
import type { Principal } from "@den/control-plane";
import type { E2bTemplateBuilds } from "./builds.js";
import type { E2bTemplateCatalog } from "./catalog.js";

const hide = { hide: true } as const;
const TemplateParams = z.object({ templateID: z.string().min(1).max(256) });
const BuildParams = TemplateParams.extend({ buildID: z.string().min(1).max(128) });

export interface E2bTemplates {
  builds: E2bTemplateBuilds;
  catalog: E2bTemplateCatalog;
}

export function registerE2bTemplateRoutes(typed: TypedApp, cp: ControlPlane, templates: E2bTemplates, who: (req: FastifyRequest) => Principal): void {
  const { builds, catalog } = templates;

  typed.post("/v3/templates", { schema: { ...hide, body: e2bTemplates.TemplateBuildRequestV3 } }, async (req, reply) => {
    return reply.status(202).send(await builds.request(who(req), req.body));
  });

  typed.get("/templates/:templateID/files/:hash", { schema: { ...hide, params: TemplateParams.extend({ hash: e2bTemplates.FilesHash }) } }, async (req, reply) => {
    const link = await builds.fileLink(who(req), req.params.templateID, req.params.hash, serverBase(cp.config, req.headers.host));
    return reply.status(201).send(link);
  });

  typed.post("/v2/templates/:templateID/builds/:buildID", { schema: { ...hide, params: BuildParams, body: e2bTemplates.TemplateBuildStartV2 } }, async (req, reply) => {
    await builds.start(who(req), req.params.templateID, req.params.buildID, req.body);
    return reply.status(202).send();
  });

  typed.get("/templates/:templateID/builds/:buildID/status", {
    schema: { ...hide, params: BuildParams, querystring: z.object({ logsOffset: z.coerce.number().int().min(0).optional(), limit: z.coerce.number().int().min(1).max(1000).optional() }) },
  }, async (req) => builds.status(who(req), req.params.templateID, req.params.buildID, req.query.logsOffset ?? 0, req.query.limit ?? 100));

  typed.get("/templates/aliases/:alias", { schema: { ...hide, params: z.object({ alias: z.string().min(1).max(256) }) } }, async (req) => catalog.alias(who(req), req.params.alias));

  typed.get("/templates/:templateID", {
    schema: { ...hide, params: TemplateParams, querystring: z.object({ limit: z.coerce.number().int().min(1).max(e2bApi.PAGE_MAX).optional(), nextToken: z.string().max(128).optional() }) },
  }, async (req, reply) => {
    const { template, next } = await catalog.withBuilds(who(req), req.params.templateID, req.query.limit ?? e2bApi.PAGE_MAX, req.query.nextToken);
    if (next) reply.header(e2bApi.NEXT_TOKEN_HEADER, next);
    return template;
  });

  typed.get("/templates/:templateID/tags", { schema: { ...hide, params: TemplateParams } }, async (req) => catalog.tags(who(req), req.params.templateID));

  // Tags are a build's, given when it is requested; moving them later is not Den's.
  const fixedTags = async () => {
    throw new DenError("invalid_argument", "tags are given when a template is built (Template.build(t, 'name:tag') or {tags}) and stay with that build; assigning or removing them later is not supported");
  };
  typed.post("/templates/tags", { schema: hide }, fixedTags);
  typed.delete("/templates/tags", { schema: hide }, fixedTags);
}
