import type http from "node:http";
import type https from "node:https";
import type { Duplex } from "node:stream";
import Fastify, { type FastifyError, type FastifyInstance } from "fastify";
import { WebSocketServer } from "ws";
import type { z } from "zod";
import { DenError, host, inventoryCpuSeconds, type HostAgent, parseInput } from "@den/protocol";
import { peerIdentity, serverTlsOptions, type MachineTls } from "@den/pki";
import { EventHub } from "./events.js";
import { serveExecSocket } from "./exec-socket.js";
import { registerGuestRoutes } from "./guest-routes.js";
import { refuseUpgrade, serveTunnel } from "./tunnel.js";
import { asDenError, errorBody } from "./wire-errors.js";
import { processCpuSeconds, WORK_HEADER } from "../work.js";

type Routes = host.ControlRoutes;
type BodyOf<K extends keyof Routes> = Routes[K] extends { body: infer B extends z.ZodType } ? z.infer<B> : undefined;
type Handlers = { [K in keyof Routes]: (params: Record<string, string>, body: BodyOf<K>) => Promise<z.input<Routes[K]["response"]>> };

const ok = {};

/** Each control route of the protocol, onto the host agent's sub-service call it stands for. */
function handlers(agent: HostAgent): Handlers {
  const id = (p: Record<string, string>, name = "id") => parseInput(host.HostId, p[name], `path ${name}`);
  const { vms, volumes, templates, snapshots } = agent;
  return {
    info: async () => ({ protocol: host.PROTOCOL_VERSION, instance: agent.instance }),
    create: (_p, b) => vms.create(b.op, b.spec),
    restore: (p, b) => vms.restore(b.op, id(p), b.snapshot, b.network, b.volumes),
    destroy: async (p) => (await vms.destroy(id(p)), ok),
    hibernateWarm: async (p, b) => (await vms.hibernateWarm(b.op, id(p), b.snapshotId), ok),
    upload: (p, b) => vms.upload(b.op, id(p), b.to, b.fromWarm),
    wakeWarm: async (p, b) => (await vms.wakeWarm(b.op, id(p), b.snapshotId), ok),
    hibernateDisk: async (p, b) => (await vms.hibernateDisk(b.op, id(p)), ok),
    wakeDisk: async (p, b) => (await vms.wakeDisk(b.op, id(p)), ok),
    checkpoint: (p, b) => vms.checkpoint(b.op, id(p), b.to),
    fork: async (p, b) => ({ children: await vms.fork(b.op, id(p), b.children, b.network, b.volumes) }),
    resume: async (p) => (await vms.resume(id(p)), ok),
    setNetwork: async (p, b) => (await vms.setNetwork(id(p), b.policy), ok),
    networkRefusals: async (p) => ({ refused: (await vms.networkRefusals(id(p))) ?? null }),
    checkCreate: async (_p, b) => (await vms.checkCreate(b.spec), ok),
    checkShape: async (_p, b) => (await vms.checkShape(b.shape), ok),
    createVolume: async (_p, b) => (await volumes.create(b.op, b.id, b.sizeMb), ok),
    deleteVolume: async (p) => (await volumes.delete(id(p)), ok),
    growVolume: async (p, b) => (await volumes.grow(b.op, id(p), b.sizeMb, b.helper), ok),
    parkVolume: (p, b) => volumes.park(b.op, id(p), b.to),
    fetchVolume: async (p, b) => (await volumes.fetch(b.op, id(p), b.from), ok),
    volumeImages: async () => ({ images: await volumes.images() }),
    dropVolumeImage: async (p, b) => ({ dropped: await volumes.dropImage(id(p), b.inode) }),
    dropLocalSnapshot: async (p) => (await snapshots.dropLocal(id(p, "snapshotId")), ok),
    unpin: async (p) => (await snapshots.unpin(id(p, "snapshotId")), ok),
    collectLocal: async (_p, b) => (await snapshots.collect(b.snapshots, b.pins), ok),
    templates: async () => ({ templates: await templates.list() }),
    deleteTemplate: async (p) => (await templates.delete(id(p, "name")), ok),
    buildTemplate: (_p, b) => templates.build(b.op, b.spec),
    buildLog: (p, b) => templates.buildLog(id(p, "op"), b.from),
    cancelBuild: async (p) => (await templates.cancelBuild(id(p, "op")), ok),
    publishTemplate: (p, b) => templates.publish(b.op, id(p, "name"), id(p, "version"), b.key),
    fetchTemplate: async (p, b) => (await templates.fetch(b.op, id(p, "name"), id(p, "version"), b.key, b.current, b.digests), ok),
    settled: async (p) => (await agent.settled(id(p, "op")), ok),
    inventory: () => agent.inventory(),
    // (What the inventory says, for control planes of before that ask for these alone.)
    capacity: async () => (await agent.inventory()).capacity,
    cpuSeconds: async (p) => ({ cpuSeconds: inventoryCpuSeconds(await agent.inventory(), id(p)) ?? null }),
  };
}

const EXEC_WS = /^\/host\/v1\/sandboxes\/([^/?]+)\/exec\/ws(?:\?.*)?$/;
const TUNNEL = /^\/host\/v1\/sandboxes\/([^/?]+)\/tunnel\/(\d{1,5})(?:\?.*)?$/;

export interface HostServerOptions {
  /**
   * Mutual TLS: this host's certificate; every caller must present a control plane's of the
   * same CA (the handshake refuses any other; a host's certificate gets a 403).
   */
  tls: MachineTls;
  logger?: boolean | object;
  /** Largest JSON body (a collect with many ids, a big stdin). */
  bodyLimit?: number;
}

/**
 * The host agent's HTTP server (`/host/v1`, HOST-PROTOCOL.md): each control call checked
 * against its zod schema and passed to `agent`; the guest data plane as plain routes,
 * a WebSocket for streamed execs and `Upgrade: den-tcp` for tunnels; transfer progress as
 * an NDJSON stream. A thrown DenError goes back whole, with its status.
 */
export async function buildHostServer(agent: HostAgent, opts: HostServerOptions): Promise<FastifyInstance> {
  const authenticate = callerCheck(opts);
  const app = Fastify({
    logger: opts.logger ?? false, bodyLimit: opts.bodyLimit ?? 64 * 1024 * 1024, routerOptions: { maxParamLength: 200 },
    https: serverTlsOptions(opts.tls),
  }) as unknown as FastifyInstance;
  const events = new EventHub();
  agent.onTransfer = (transfer) => events.publish({ type: "transfer", transfer });
  // Before the server waits for its connections: a control plane's event stream never ends by itself.
  app.addHook("preClose", async () => events.close());

  // File bytes are streamed to the guest, never buffered here.
  app.addContentTypeParser("application/octet-stream", (_req, payload, done) => done(null, payload));

  // Each answer says how much CPU this process spent while it was being made: the control
  // plane bills it to the sandbox as Den's own work (concurrent calls overlap, as in-process).
  const cpuAtStart = new WeakMap<object, number>();
  app.addHook("onRequest", async (req) => {
    cpuAtStart.set(req, processCpuSeconds());
  });
  app.addHook("onSend", async (req, reply) => {
    const t0 = cpuAtStart.get(req);
    if (t0 !== undefined) reply.header(WORK_HEADER, String(Math.max(0, Math.round((processCpuSeconds() - t0) * 1e6))));
  });

  app.addHook("onRequest", async (req) => authenticate(req.raw));

  app.setErrorHandler((err: FastifyError | Error, req, reply) => {
    if (err instanceof DenError) return reply.status(err.status).send(errorBody(err));
    const fe = err as FastifyError;
    if (fe.code === "FST_ERR_CTP_BODY_TOO_LARGE") return reply.status(413).send(errorBody(new DenError("payload_too_large", "request body is too large")));
    if (fe.statusCode && fe.statusCode >= 400 && fe.statusCode < 500) return reply.status(400).send(errorBody(new DenError("invalid_argument", fe.message)));
    req.log.error({ err }, "unhandled error in the host agent");
    return reply.status(500).send(errorBody(asDenError(err)));
  });
  app.setNotFoundHandler((req, reply) => reply.status(404).send(errorBody(new DenError("route_not_found", `no host route ${req.method} ${req.url.split("?")[0]}`))));

  const table = handlers(agent);
  for (const [name, r] of Object.entries(host.control) as Array<[keyof Routes, Routes[keyof Routes]]>) {
    const handle = table[name] as (p: Record<string, string>, b: unknown) => Promise<unknown>;
    app.route({
      method: r.method, url: r.path,
      handler: async (req) => handle(req.params as Record<string, string>, "body" in r ? parseInput(r.body, req.body, "body") : undefined),
    });
  }

  app.get("/host/v1/events", async (_req, reply) => reply.type("application/x-ndjson").header("cache-control", "no-store").send(events.subscribe()));

  registerGuestRoutes(app, agent);

  // Upgrades (a streamed exec's WebSocket, a tunnel) are authenticated here, before any protocol switch.
  const wss = new WebSocketServer({ noServer: true, maxPayload: 1024 * 1024 });
  app.server.on("upgrade", (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on("error", () => undefined);
    try {
      authenticate(req);
      const url = req.url ?? "";
      const exec = EXEC_WS.exec(url);
      const tunnel = TUNNEL.exec(url);
      const upgrade = (req.headers.upgrade ?? "").toLowerCase();
      if (exec && upgrade === "websocket") {
        const id = parseInput(host.HostId, decodeURIComponent(exec[1]!), "sandbox id");
        wss.handleUpgrade(req, socket, head, (ws) => serveExecSocket(ws, () => agent.guest(id)));
      } else if (tunnel && upgrade === "den-tcp") {
        const id = parseInput(host.HostId, decodeURIComponent(tunnel[1]!), "sandbox id");
        const port = Number(tunnel[2]);
        if (port < 1 || port > 65535) throw new DenError("invalid_argument", `port ${port} is out of range`);
        void serveTunnel(socket, head, () => agent.guest(id), port);
      } else {
        throw new DenError("route_not_found", `no host upgrade ${upgrade} at ${url.split("?")[0]}`);
      }
    } catch (e) {
      refuseUpgrade(socket, e);
    }
  });
  app.addHook("onClose", async () => {
    for (const c of wss.clients) c.terminate();
    wss.close();
  });
  return app;
}

/**
 * Who may call: a peer whose verified certificate names a control plane (the handshake
 * already refused any certificate of another CA, and none).
 */
function callerCheck(opts: HostServerOptions): (req: http.IncomingMessage) => void {
  if (!opts?.tls) throw new Error("the host agent serves only over mutual TLS: it needs its certificate (den host run --join TOKEN, or an identity in its tls dir)");
  return (req) => {
    const peer = peerIdentity(req.socket);
    if (!peer) throw new DenError("unauthorized", "the host agent takes calls only over mutual TLS, with a certificate of its deployment's CA");
    if (peer.kind !== "control-plane") throw new DenError("forbidden", `a ${peer.kind}'s certificate (${peer.id}) may not call a host agent: only a control plane's`);
  };
}

export interface RunningHostServer {
  app: FastifyInstance;
  url: string;
  close(): Promise<void>;
  /** A renewed certificate for new connections (those open keep theirs); over mutual TLS only. */
  reload(tls: MachineTls): void;
}

/** Builds the host server and listens; `port: 0` picks a free one. */
export async function startHostServer(agent: HostAgent, opts: HostServerOptions & { port: number; host: string }): Promise<RunningHostServer> {
  const app = await buildHostServer(agent, opts);
  await app.listen({ port: opts.port, host: opts.host });
  const addr = app.server.address();
  const port = typeof addr === "object" && addr ? addr.port : opts.port;
  return {
    app, url: `https://${opts.host.includes(":") ? `[${opts.host}]` : opts.host}:${port}`, close: () => app.close(),
    reload: (tls) => {
      (app.server as unknown as https.Server).setSecureContext(serverTlsOptions(tls));
    },
  };
}
