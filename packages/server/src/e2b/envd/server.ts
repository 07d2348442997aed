/**
 * The envd listener: Connect RPCs at `/<service>/<method>`, `/files` and `/health`, each
 * request routed by `E2b-Sandbox-Id` to a sandbox the EnvdSandboxes seam opens after auth.
 * Every reply is written by hand on the raw response (envelopes, abrupt cuts), so routes
 * hijack it from Fastify.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from "fastify";
import { DenError, e2b } from "@den/protocol";
import { ConnectError, EnvelopeStream, decodeRequestEnvelope, keepaliveOf, parseJson, sendUnary, sendUnaryError, timeoutOf, toConnectError } from "./connect.js";
import { HttpError, download, filesQuery, httpStatusOf, sendHttpError, upload } from "./files-http.js";
import { envdHttpServer, type EnvdPortTraffic } from "./listener.js";
import { filesystemService } from "./filesystem-service.js";
import { processService } from "./process-service.js";
import { credentialsOf, namedSandbox, sandboxIdOf, userOf } from "./request.js";
import type { RpcContext, Service } from "./rpc.js";
import { EnvdDenied, EnvdUnavailable, type EnvdSandbox, type EnvdSandboxes, type EnvdSignature } from "./seam.js";
import { SandboxStates } from "./state.js";

/** An RPC request body (SendInput carries at most 1 MiB, base64). */
const MAX_RPC_BODY = 2 * 1024 * 1024;
const DEFAULT_MAX_UPLOAD = 1024 * 1024 * 1024;

const SERVICES: Record<string, Service> = { "process.Process": processService, "filesystem.Filesystem": filesystemService };

export interface EnvdServerOptions {
  logger?: boolean | FastifyBaseLogger | Record<string, unknown>;
  /** The most bytes one uploaded file may have (default 1 GiB). */
  maxUploadBytes?: number;
  /** Takes E2B's port traffic (`E2b-Sandbox-Port` other than envd's) before envd routes a request. */
  portTraffic?: EnvdPortTraffic;
}

/** A client gets this long to send an RPC body (it is small). */
const BODY_MS = 30_000;

function readBody(req: IncomingMessage, max: number): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const timer = setTimeout(() => {
      req.destroy();
      reject(new ConnectError("deadline_exceeded", "request body not received in time"));
    }, BODY_MS);
    const resolveBody = (b: Buffer) => {
      clearTimeout(timer);
      resolve(b);
    };
    const parts: Buffer[] = [];
    let n = 0;
    req.on("data", (c: Buffer) => {
      n += c.length;
      if (n > max) {
        req.destroy();
        reject(new ConnectError("resource_exhausted", `request body exceeds ${max} bytes`));
      } else parts.push(c);
    });
    req.on("end", () => resolveBody(Buffer.concat(parts)));
    const lost = () => reject(new ConnectError("canceled", "request body was not received"));
    req.on("error", lost);
    req.on("close", () => {
      clearTimeout(timer);
      if (!req.complete) lost();
    });
  });
}

/** Auth failures and gone sandboxes answer with their HTTP status, as E2B's edge does. */
function gateStatus(e: unknown): number | undefined {
  if (e instanceof EnvdDenied) return 401;
  if (e instanceof EnvdUnavailable) return 502;
  return undefined;
}

export async function buildEnvdServer(sandboxes: EnvdSandboxes, opts: EnvdServerOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({
    logger: (opts.logger ?? false) as boolean, bodyLimit: MAX_RPC_BODY, routerOptions: { maxParamLength: 200 },
    serverFactory: (handler) => envdHttpServer(handler, opts.portTraffic),
    // A stop cuts what still streams (a command's output, a port's answer): their sandboxes
    // hibernate with the stop anyway, and a close must not wait out a client that never hangs up.
    forceCloseConnections: true,
  });
  const states = new SandboxStates();
  const maxUpload = opts.maxUploadBytes ?? DEFAULT_MAX_UPLOAD;
  // Bodies are read by the routes themselves, bounded, from the raw request.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", (_req, _payload, done) => done(null));
  app.addHook("onClose", async () => states.clear());

  /** `probe`: a health check, which is not activity (a poller must not keep a sandbox from idling). */
  const open = async (req: IncomingMessage, signature?: Parameters<typeof credentialsOf>[1], probe = false): Promise<{ id: string; sandbox: EnvdSandbox }> => {
    // A signed URL from the shared origin names no sandbox: its signature does (the seam finds which).
    const id = !namedSandbox(req.headers) && signature && sandboxes.bySignature ? await signedSandbox(signature) : sandboxIdOf(req.headers);
    const sandbox = await sandboxes.open(id, credentialsOf(req.headers, signature), { probe });
    if (!probe) sandbox.touch();
    return { id, sandbox };
  };

  async function signedSandbox(signature: EnvdSignature): Promise<string> {
    const id = await sandboxes.bySignature!(signature);
    if (!id) throw new EnvdDenied(signature.expiration !== undefined && signature.expiration * 1000 < Date.now() ? "the signed URL has expired" : "the signature matches no sandbox");
    return id;
  }

  async function rpc(req: IncomingMessage, res: ServerResponse, serviceName: string, method: string): Promise<void> {
    const service = SERVICES[serviceName];
    const unary = service?.unary[method];
    const stream = service?.stream[method];
    if (!unary && !stream) return sendUnaryError(res, new ConnectError("unimplemented", `${serviceName}/${method} is not implemented`), 404);
    const type = String(req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
    if (type !== (unary ? "application/json" : "application/connect+json")) {
      return sendUnaryError(res, new ConnectError("invalid_argument", `content-type ${type || "(none)"} is not supported (JSON codec only)`), 415);
    }
    let ctx: RpcContext;
    let msg: unknown;
    try {
      const body = await readBody(req, MAX_RPC_BODY);
      msg = unary ? parseJson(body) : decodeRequestEnvelope(body);
      const { id, sandbox } = await open(req);
      ctx = { sandboxId: id, sandbox, state: states.get(id, sandbox), user: userOf(req.headers, sandbox.user), timeoutMs: timeoutOf(req.headers["connect-timeout-ms"]) };
    } catch (e) {
      return sendUnaryError(res, toConnectError(e), gateStatus(e));
    }
    if (unary) {
      try {
        sendUnary(res, await unary(ctx, msg));
      } catch (e) {
        sendUnaryError(res, toConnectError(e));
      }
      return;
    }
    const out = new EnvelopeStream(res);
    // A killed sandbox cuts its streams: no end-of-stream, so the client asks /health and says "killed".
    const unsubscribe = ctx.sandbox.onGone(() => out.abort());
    const every = keepaliveOf(req.headers["keepalive-ping-interval"]);
    const ping = every ? setInterval(() => {
      ctx.sandbox.touch();
      void out.send(stream!.keepalive);
    }, every) : undefined;
    try {
      // One of the owner's slots while it lasts: past the owner's bound nothing starts (resource_exhausted).
      const release = ctx.sandbox.hold(stream!.holds);
      try {
        await stream!.handler(ctx, msg, out);
      } finally {
        release();
      }
      out.end();
    } catch (e) {
      out.end(toConnectError(e));
    } finally {
      clearInterval(ping);
      unsubscribe();
    }
  }

  function fileError(res: ServerResponse, e: unknown): void {
    const gate = gateStatus(e);
    if (gate) return sendHttpError(res, gate, (e as Error).message);
    if (e instanceof HttpError) return sendHttpError(res, e.status, e.message);
    if (e instanceof ConnectError) return sendHttpError(res, e2b.CONNECT_HTTP_STATUS[e.code], e.message);
    if (e instanceof DenError) return sendHttpError(res, httpStatusOf(e), e.status < 500 || e.code === "timeout" ? e.message : `internal error (${e.code})`);
    app.log.error({ err: e }, "envd /files failed");
    sendHttpError(res, 500, "internal error");
  }

  async function files(req: IncomingMessage, res: ServerResponse, op: "read" | "write"): Promise<void> {
    try {
      const q = filesQuery(req.url ?? "/", op);
      const { sandbox } = await open(req, q.signature);
      const user = q.username ?? userOf(req.headers, sandbox.user);
      const unsubscribe = sandbox.onGone(() => res.destroy());
      try {
        if (op === "read") await download(sandbox.guest, user, q, res);
        else {
          const body = JSON.stringify(await upload(sandbox.guest, user, q, req, maxUpload));
          res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
          res.end(body);
        }
      } finally {
        unsubscribe();
        sandbox.touch();
      }
    } catch (e) {
      // An upload refused early: drop the rest of its body instead of reading it.
      if (op === "write" && !req.complete) res.setHeader("connection", "close");
      fileError(res, e);
    }
  }

  app.post<{ Params: { service: string; method: string } }>("/:service/:method", async (req, reply) => {
    reply.hijack();
    await rpc(req.raw, reply.raw, req.params.service, req.params.method);
  });
  app.get("/files", async (req, reply) => {
    reply.hijack();
    await files(req.raw, reply.raw, "read");
  });
  app.post("/files", async (req, reply) => {
    reply.hijack();
    await files(req.raw, reply.raw, "write");
  });
  app.get("/health", async (req, reply) => {
    reply.hijack();
    try {
      await open(req.raw, undefined, true);
      reply.raw.writeHead(204).end();
    } catch (e) {
      fileError(reply.raw, e);
    }
  });
  // The sandbox's env vars (E2B's code interpreter reads them here), behind the same credentials.
  app.get("/envs", async (req, reply) => {
    reply.hijack();
    try {
      const { sandbox } = await open(req.raw);
      const body = JSON.stringify(sandbox.env ?? {});
      reply.raw.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body), "cache-control": "no-store" }).end(body);
    } catch (e) {
      fileError(reply.raw, e);
    }
  });
  app.setNotFoundHandler((req, reply) => {
    reply.hijack();
    sendHttpError(reply.raw, 404, `no route ${req.method} ${req.url.split("?")[0]!.slice(0, 200)}`);
  });
  return app;
}
