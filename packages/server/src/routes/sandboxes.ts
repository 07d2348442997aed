import { z } from "zod";
import { DenError, api } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import { principal } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";
import { IdParams } from "./params.js";
import { toApiSandbox } from "@den/control-plane";
import { ndjsonStream } from "../ndjson.js";

export function registerSandboxRoutes(app: TypedApp, cp: ControlPlane): void {
  app.post("/v1/sandboxes", {
    schema: { summary: "Create a sandbox (restores its template's snapshot)", body: api.CreateSandboxRequest, response: { 201: api.Sandbox } },
  }, async (req, reply) => reply.status(201).send(toApiSandbox(await cp.create(principal(req), req.body))));

  app.get("/v1/sandboxes", {
    schema: {
      summary: "List sandboxes (filter by state and metadata.<key>=<value>)",
      querystring: z.object({
        state: api.SandboxState.optional(),
        limit: z.coerce.number().int().min(1).max(api.API_LIMITS.maxPageSize).optional(),
        cursor: z.string().max(64).optional(),
      }).catchall(z.string().max(512)),
      response: { 200: api.ListSandboxesResponse },
    },
  }, async (req) => {
    const q = req.query as Record<string, string | number | undefined>;
    const metadata: Record<string, string> = {};
    for (const [k, v] of Object.entries(q)) if (k.startsWith("metadata.") && typeof v === "string") metadata[k.slice(9)] = v;
    // Each filter is a subquery, and SQLite refuses a deep enough tree of them; no sandbox has
    // more keys than this anyway, so more filters could never all match.
    const filters = Object.keys(metadata).length;
    if (filters > api.API_LIMITS.maxMetadataKeys) throw new DenError("invalid_argument", `${filters} metadata filters: at most ${api.API_LIMITS.maxMetadataKeys} (a sandbox has at most that many keys)`);
    const { rows, next } = await cp.list(principal(req), {
      limit: Number(q.limit ?? 50), metadata,
      ...(typeof q.state === "string" ? { state: q.state } : {}),
      ...(typeof q.cursor === "string" ? { cursor: q.cursor } : {}),
    });
    return { sandboxes: rows.map(toApiSandbox), next_cursor: next };
  });

  app.get("/v1/sandboxes/:id", {
    schema: { summary: "Get a sandbox", params: IdParams, response: { 200: api.Sandbox } },
  }, async (req) => toApiSandbox(await cp.owned(principal(req), req.params.id)));

  app.delete("/v1/sandboxes/:id", {
    schema: { summary: "Destroy a sandbox (idempotent)", params: IdParams, response: { 200: api.Sandbox } },
  }, async (req) => {
    const row = await cp.owned(principal(req), req.params.id);
    return toApiSandbox(await cp.destroy(row.id, "user"));
  });

  app.post("/v1/sandboxes/:id/hibernate", {
    schema: { summary: "Hibernate: warm (snapshot + pause in place) or cold (snapshot to the store, VM gone). Idempotent.", params: IdParams, body: api.HibernateRequest.nullish(), response: { 200: api.Sandbox } },
  }, async (req) => {
    const row = await cp.owned(principal(req), req.params.id);
    return toApiSandbox(await cp.hibernate(row.id, "user", req.body?.mode ?? "warm"));
  });

  app.post("/v1/sandboxes/:id/wake", {
    schema: { summary: "Wake a hibernated sandbox. Idempotent.", params: IdParams, response: { 200: api.Sandbox } },
  }, async (req) => {
    const row = await cp.owned(principal(req), req.params.id);
    return toApiSandbox(await cp.wake(row.id, "user"));
  });

  app.put("/v1/sandboxes/:id/network", {
    schema: { summary: "Set the network policy: at once if running, at wake if hibernated", params: IdParams, body: api.NetworkPolicy, response: { 200: api.Sandbox } },
  }, async (req) => toApiSandbox(await cp.network.set(principal(req), req.params.id, req.body)));

  app.get("/v1/sandboxes/:id/network", {
    schema: { summary: "The network policy, whether the network is up, and refused attempts since it came up", params: IdParams, response: { 200: api.NetworkStatus } },
  }, async (req) => cp.network.status(principal(req), req.params.id));

  app.post("/v1/sandboxes/:id/timeout", {
    schema: { summary: "Set the TTL deadline to now + seconds", params: IdParams, body: api.TimeoutRequest, response: { 200: api.Sandbox } },
  }, async (req) => {
    const row = await cp.owned(principal(req), req.params.id);
    return toApiSandbox(await cp.setTimeout(row.id, req.body.seconds));
  });

  app.get("/v1/sandboxes/:id/events", {
    schema: {
      summary: "The sandbox's lifecycle log; follow=true streams it as NDJSON",
      params: IdParams,
      querystring: z.object({ after: z.coerce.number().int().min(0).optional(), follow: z.enum(["true", "false"]).optional() }),
    },
  }, async (req, reply) => {
    const row = await cp.owned(principal(req), req.params.id);
    let after = req.query.after ?? 0;
    if (req.query.follow !== "true") return { events: (await cp.events(row, after)).events };
    const release = cp.slots.follows.take(row.owner);
    let open = true;
    reply.raw.on("close", () => {
      open = false;
      release();
    });
    async function* follow(): AsyncGenerator<string> {
      while (open) {
        const { events, ended } = await cp.events(row, after);
        for (const e of events) {
          yield JSON.stringify(e) + "\n";
          after = e.seq;
        }
        if (ended) return;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    return reply.type("application/x-ndjson").header("cache-control", "no-store").send(ndjsonStream(follow()));
  });
}
