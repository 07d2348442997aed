import type https from "node:https";
import Fastify, { type FastifyError, type FastifyInstance, type FastifyRequest } from "fastify";
import { hasZodFastifySchemaValidationErrors, serializerCompiler, validatorCompiler, type ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import { DenError, host } from "@den/protocol";
import { type Identity, type MachineTls, peerIdentity, peerSerial, serverTlsOptions } from "@den/pki";
import type { ControlPlane } from "@den/control-plane";
import type { IssuedCert } from "@den/control-plane";
import { validationMessage } from "./validation.js";

/** Heartbeats, drains, joins and renewals are small: a megabyte is plenty. */
const BODY_BYTES = 1024 * 1024;

const HostParams = z.object({ id: z.string().min(1).max(128) });

const errorBody = (code: string, message: string) => ({ error: { code, message } });
const reply = (c: IssuedCert): host.JoinReply => ({ certificate: c.certPem, ca: c.caPem, serial: c.serial, not_after: new Date(c.notAfter).toISOString() });

export interface FleetListener {
  app: FastifyInstance;
  url: string;
  /** This replica's renewed certificate for new connections (those open keep theirs). */
  reload(tls: MachineTls): void;
  close(): Promise<void>;
}

/**
 * The hosts' listener (DEN_FLEET_PORT): TLS 1.3 with this replica's certificate, a client
 * certificate of the deployment's CA asked for but not required, so a machine with none yet
 * can join with its token. Every other route checks the verified certificate itself: its
 * kind, that it names the host the call is about (host A's certificate never speaks for host
 * B), and that neither it nor its machine was revoked. Apart from the public API, so the
 * hosts' port can be firewalled to the hosts' network.
 */
export async function startFleetListener(cp: ControlPlane, tls: MachineTls, opts: { port: number; host: string; logger?: boolean | object }): Promise<FleetListener> {
  const app = Fastify({ https: serverTlsOptions(tls, { optionalClient: true }), logger: opts.logger ?? false, bodyLimit: BODY_BYTES, routerOptions: { maxParamLength: 200 } });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.setErrorHandler((err: FastifyError | DenError | Error, req, res) => {
    if (err instanceof DenError) return res.status(err.status).send(errorBody(err.code, err.message));
    if (hasZodFastifySchemaValidationErrors(err)) return res.status(400).send(errorBody("invalid_argument", validationMessage(err)));
    const fe = err as FastifyError;
    if (fe.code === "FST_ERR_CTP_BODY_TOO_LARGE") return res.status(413).send(errorBody("payload_too_large", "request body is too large"));
    if (fe.statusCode && fe.statusCode >= 400 && fe.statusCode < 500) return res.status(fe.statusCode).send(errorBody("invalid_argument", fe.message));
    req.log.error({ err }, "unhandled error");
    return res.status(500).send(errorBody("internal", "internal error"));
  });
  app.setNotFoundHandler((req, res) => res.status(404).send(errorBody("route_not_found", `no route ${req.method} ${req.url.split("?")[0]}`)));

  /** The caller's machine, by its verified certificate: of one of `kinds`, and not revoked. */
  const caller = async (req: FastifyRequest, kinds: Array<Identity["kind"]>): Promise<Identity> => {
    const who = peerIdentity(req.raw.socket);
    const serial = peerSerial(req.raw.socket);
    if (!who || !serial) throw new DenError("unauthorized", "this call needs a client certificate of the deployment's CA (join first: den host run --join TOKEN)");
    if (!kinds.includes(who.kind)) throw new DenError("forbidden", `a ${who.kind}'s certificate may not make this call`);
    await cp.enrollment.admit(who, serial);
    return who;
  };
  const sameHost = (who: Identity, id: string) => {
    if (who.id !== id) throw new DenError("forbidden", `this certificate is host ${who.id}'s: it does not speak for host ${id}`);
  };

  const typed = app.withTypeProvider<ZodTypeProvider>();
  typed.get(host.registration.ca.path, { schema: { response: { 200: host.CaReply } } }, async () => ({ ca: (await cp.enrollment.authority()).certPem }));

  typed.post(host.registration.join.path, { schema: { body: host.JoinRequest, response: { 200: host.JoinReply } } },
    async (req) => reply(await cp.enrollment.redeem(req.body.token, req.body.csr, req.body.machine_id)));

  typed.post(host.registration.heartbeat.path, { schema: { body: host.Heartbeat, response: { 200: host.HeartbeatReply } } }, async (req) => {
    sameHost(await caller(req, ["host"]), req.body.id);
    // This replica reaches hosts over mutual TLS only.
    if (!req.body.address.startsWith("https://")) throw new DenError("invalid_argument", `a host of this deployment serves https (mutual TLS), not ${req.body.address}`);
    return cp.registry.heartbeat(req.body);
  });

  typed.post(host.registration.drain.path, { schema: { params: HostParams, body: host.registration.drain.body, response: { 200: host.registration.drain.response } } }, async (req) => {
    sameHost(await caller(req, ["host"]), req.params.id);
    return { left: await cp.registry.drain(req.params.id) };
  });

  typed.post(host.registration.renew.path, { schema: { body: host.RenewRequest, response: { 200: host.JoinReply } } },
    async (req) => reply(await cp.enrollment.renew(await caller(req, ["host", "control-plane"]), req.body.csr)));

  await app.listen({ port: opts.port, host: opts.host });
  const addr = app.server.address();
  const port = typeof addr === "object" && addr ? addr.port : opts.port;
  return {
    app, url: `https://${opts.host.includes(":") ? `[${opts.host}]` : opts.host}:${port}`,
    reload: (t) => (app.server as unknown as https.Server).setSecureContext(serverTlsOptions(t, { optionalClient: true })),
    close: () => app.close(),
  };
}
