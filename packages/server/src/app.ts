import http from "node:http";
import Fastify, { LogController, type FastifyError, type FastifyInstance, type FastifyRequest } from "fastify";
import swagger from "@fastify/swagger";
import websocket from "@fastify/websocket";
import { hasZodFastifySchemaValidationErrors, jsonSchemaTransform, serializerCompiler, validatorCompiler, type ZodTypeProvider } from "fastify-type-provider-zod";
import { DenError, type ErrorCode } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import { bearerKey } from "@den/control-plane";
import { registerSandboxRoutes } from "./routes/sandboxes.js";
import { registerExecRoutes } from "./routes/exec.js";
import { registerCodeRoutes } from "./routes/code.js";
import { registerFileRoutes } from "./routes/files.js";
import { registerAdminRoutes } from "./routes/admin.js";
import { registerHostRoutes } from "./routes/hosts.js";
import { registerJoinRoutes } from "./routes/join.js";
import { registerPtyRoutes } from "./routes/pty.js";
import { registerCheckpointRoutes } from "./routes/checkpoints.js";
import { registerWebhookRoutes } from "./routes/webhooks.js";
import { registerVolumeRoutes } from "./routes/volumes.js";
import { registerUsageRoutes } from "./routes/usage.js";
import { registerPortRoutes } from "./routes/ports.js";
import { registerHealthRoutes } from "./routes/health.js";
import { PortProxy } from "./ports/proxy.js";
import { PortTokens } from "./ports/tokens.js";
import { registerDashboardRoutes } from "./routes/dashboard.js";
import { registerMcpRoutes } from "./routes/mcp.js";
import { registerE2bRoutes, type E2bSurface } from "./e2b/index.js";
import { validationMessage } from "./validation.js";

declare module "fastify" {
  interface FastifyInstance {
    /** Every documented route, as registered (the OpenAPI test checks the document against it). */
    denRoutes: Array<{ method: string; url: string }>;
    /** The port proxy this app serves sandboxes' ports with (the envd listener forwards E2B's port traffic through it too). */
    portProxy: PortProxy;
  }
}

export type { TypedApp } from "./typed-app.js";
export { principal, requireAdmin } from "./principal.js";

const PTY_PATH_DOC = {
  "/v1/sandboxes/{id}/pty": {
    get: {
      summary: "Interactive shell on a PTY (WebSocket upgrade)",
      description: "Binary messages: stdin (client) and terminal output (server). Text messages: {type:'resize',rows,cols} and {type:'signal',signal} from the client; {type:'exit',exit_code,signal} or {type:'error',error} from the server, before it closes.",
      parameters: [
        { name: "id", in: "path", required: true, schema: { type: "string" } },
        { name: "cmd", in: "query", schema: { type: "string", maxLength: 4096 } },
        { name: "cwd", in: "query", schema: { type: "string", maxLength: 4096 } },
        { name: "rows", in: "query", schema: { type: "integer", minimum: 1, maximum: 1000 } },
        { name: "cols", in: "query", schema: { type: "integer", minimum: 1, maximum: 1000 } },
      ],
      responses: { "101": { description: "Switching to the WebSocket protocol" } },
    },
  },
  "/v1/sandboxes/{id}/ports/{port}/{path}": {
    get: {
      summary: "A server listening on `port` inside the sandbox (any method; WebSockets too)",
      description: "Forwarded to the guest's server as is, minus Den's credentials; the sandbox wakes if hibernated. Authenticated by the owner's key, or a signed URL's `den_token` (query parameter, then cookie). The same is served at `/` of the host `{port}-sbx-{...}.<DEN_PORTS_DOMAIN>`. `Upgrade: den-tcp` on `/v1/sandboxes/{id}/ports/{port}` splices a raw TCP connection to the port.",
      parameters: [
        { name: "id", in: "path", required: true, schema: { type: "string" } },
        { name: "port", in: "path", required: true, schema: { type: "integer", minimum: 1, maximum: 65535 } },
        { name: "path", in: "path", required: true, schema: { type: "string" } },
        { name: "den_token", in: "query", schema: { type: "string" } },
      ],
      responses: {
        "200": { description: "Whatever the guest's server answers" },
        "401": { description: "No key or signed URL, or an expired one" },
        "502": { description: "Nothing listens on the port (code connection_refused)" },
      },
    },
  },
};

function errorBody(code: ErrorCode, message: string, details?: Record<string, unknown>) {
  return { error: { code, message, ...(details ? { details } : {}) } };
}

/** The caller's identity; routes under /v1 always have one (the auth hook ran). */
/** Builds the HTTP app: validation from the shared zod schemas, one error format, auth on /v1. */
export async function buildApp(cp: ControlPlane, opts: { logger?: boolean | object; e2b?: E2bSurface } = {}): Promise<FastifyInstance> {
  // Requests for sandboxes' ports bypass the API's routing: their bodies and upgrades go to the guest as they are.
  const tokens = await PortTokens.open(cp, cp.config.dataDir);
  const e2bTokens = opts.e2b?.tokens;
  const proxy = new PortProxy(cp, tokens, cp.config.ports.domain, cp.config.ports.maxConnectionsPerOwner, e2bTokens ? (id, t) => e2bTokens.check("traffic", id, t) : undefined,
    e2bTokens ? (id, t) => e2bTokens.check("envd", id, t) : undefined);
  const app = Fastify({
    serverFactory: (handler) => http.createServer((req, res) => {
      const t = proxy.match(req);
      if (t) void proxy.handle(req, res, t);
      else handler(req, res);
    }),
    logger: opts.logger ?? false,
    // One line per request, below (at debug: an agent's forty calls an hour per sandbox must not drown the operator).
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: cp.config.limits.bodyBytes,
    // Ids and paths travel in URLs; keep them bounded.
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 200 },
  });
  const routes: Array<{ method: string; url: string }> = [];
  app.decorate("denRoutes", routes);
  app.decorate("portProxy", proxy);
  app.addHook("onRoute", (r) => {
    if ((r.schema as { hide?: boolean } | undefined)?.hide) return;
    for (const m of [r.method].flat()) if (m !== "HEAD") routes.push({ method: m, url: r.url });
  });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  await app.register(swagger, {
    openapi: {
      info: { title: "Den API", version: "1.0.0", description: "Long-running microVM sandboxes for AI agents" },
      components: { securitySchemes: { bearer: { type: "http", scheme: "bearer" } } },
      security: [{ bearer: [] }],
    },
    transform: jsonSchemaTransform,
    // @fastify/websocket hides WebSocket routes from the document; describe the PTY by hand.
    transformObject: (doc) => {
      const o = (doc as { openapiObject: { paths?: Record<string, unknown> } }).openapiObject;
      o.paths = { ...o.paths, ...PTY_PATH_DOC };
      return o as never;
    },
  });

  await app.register(websocket, { options: { maxPayload: 1024 * 1024 } });

  // Uploads are streamed to the guest, never buffered here.
  app.addContentTypeParser("application/octet-stream", (_req, payload, done) => done(null, payload));

  app.setErrorHandler((err: FastifyError | DenError | Error, req, reply) => {
    // Details say more about the caller's mistake (a setup command's output, a quota); a server fault keeps its own.
    if (err instanceof DenError && err.code === "guest_unresponsive") {
      // A wedged guest is worth a line in its sandbox's events (the owner's route put the id there).
      const id = (req.params as { id?: unknown } | undefined)?.id;
      if (typeof id === "string" && req.principal) void cp.guests.unresponsive(id, err.message).catch(() => undefined);
    }
    if (err instanceof DenError) return reply.status(err.status).send(errorBody(err.code, err.message, err.status < 500 ? (err.details as Record<string, unknown> | undefined) : undefined));
    if (hasZodFastifySchemaValidationErrors(err)) return reply.status(400).send(errorBody("invalid_argument", validationMessage(err)));
    const fe = err as FastifyError;
    if (fe.code === "FST_ERR_CTP_BODY_TOO_LARGE") return reply.status(413).send(errorBody("payload_too_large", "request body is too large"));
    if (fe.statusCode && fe.statusCode >= 400 && fe.statusCode < 500) {
      return reply.status(fe.statusCode).send(errorBody(fe.statusCode === 413 ? "payload_too_large" : "invalid_argument", fe.message));
    }
    req.log.error({ err }, "unhandled error");
    // A system error's code (ENOSPC, EACCES) tells an operator where to look; its message (paths) stays in the log.
    const sys = typeof (err as NodeJS.ErrnoException).code === "string" && /^E[A-Z0-9]{2,15}$/.test((err as NodeJS.ErrnoException).code!) ? ` (${(err as NodeJS.ErrnoException).code})` : "";
    return reply.status(500).send(errorBody("internal", `internal error${sys}`));
  });
  app.setNotFoundHandler((req, reply) => reply.status(404).send(errorBody("route_not_found", `no route ${req.method} ${req.url.split("?")[0]}`)));

  // Every line a request logs names its sandbox, where it has one.
  app.addHook("preHandler", async (req) => {
    const id = (req.params as { id?: unknown } | undefined)?.id;
    if (typeof id === "string" && /^sbx_[a-z2-7]{16}$/.test(id)) req.log = req.log.child({ sandbox: id });
  });
  app.addHook("onResponse", async (req, reply) => {
    const line = { method: req.method, url: req.url.split("?")[0]!.slice(0, 200), status: reply.statusCode, ms: Math.round(reply.elapsedTime) };
    if (reply.statusCode >= 500) req.log.warn(line, `${req.method} ${line.url} -> ${reply.statusCode}`);
    else req.log.debug(line, `${req.method} ${line.url} -> ${reply.statusCode}`);
  });

  /** A Den key (`Authorization: Bearer`), on /v1 and /mcp: a missing or wrong one is a 401 before any handler runs. */
  const authenticate = async (req: FastifyRequest) => {
    const key = bearerKey(req.headers.authorization);
    const p = await cp.keys.principal(key);
    if (!p) throw new DenError("unauthorized", key ? "invalid or revoked API key" : "missing API key (Authorization: Bearer <key>)");
    req.principal = p;
  };
  app.addHook("onRequest", async (req) => {
    if (req.url.startsWith("/v1/")) await authenticate(req);
  });

  registerHealthRoutes(app, cp);
  app.get("/openapi.json", { schema: { hide: true } }, async () => app.swagger());

  app.addHook("onReady", async () => {
    const server = app.server;
    const others = server.listeners("upgrade") as Array<(...a: unknown[]) => void>;
    server.removeAllListeners("upgrade");
    server.on("upgrade", (req: http.IncomingMessage, socket, head: Buffer) => {
      const t = proxy.match(req);
      if (t) void proxy.upgrade(req, socket, head, t);
      else for (const l of others) l.call(server, req, socket, head);
    });
  });

  const typed = app.withTypeProvider<ZodTypeProvider>();
  registerPortRoutes(typed, cp, tokens);
  registerSandboxRoutes(typed, cp);
  registerUsageRoutes(typed, cp);
  registerExecRoutes(typed, cp);
  registerCodeRoutes(typed, cp);
  registerFileRoutes(typed, cp);
  registerAdminRoutes(typed, cp);
  registerHostRoutes(typed, cp);
  registerJoinRoutes(typed, cp);
  registerPtyRoutes(typed, cp);
  registerCheckpointRoutes(typed, cp);
  registerWebhookRoutes(typed, cp);
  registerVolumeRoutes(typed, cp);
  registerDashboardRoutes(app);
  registerMcpRoutes(app, cp, authenticate);
  if (opts.e2b) await registerE2bRoutes(app, { cp, ...opts.e2b });
  return app;
}
