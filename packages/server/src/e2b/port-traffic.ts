/**
 * E2B's port traffic on the envd listener: `@e2b/code-interpreter` >= 2.7 sends its requests
 * to `E2B_SANDBOX_URL` (envd's origin) with `E2b-Sandbox-Id` and `E2b-Sandbox-Port`. A port
 * other than envd's goes to that port of the sandbox through the port proxy's forwarding
 * (streamed both ways, WebSocket upgrades spliced), with E2B's rules: no credential unless
 * the sandbox's traffic is not public (then `E2B-Traffic-Access-Token`, or an owner's key),
 * and none of Den's credentials reach the guest.
 */
import type http from "node:http";
import type { Duplex } from "node:stream";
import { api, DenError } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import { CODE_PORT, SANDBOX_ENV_HEADER, sandboxEnvHeader } from "../ports/code-port.js";
import type { ForwardOptions, Grant, PortProxy, PortTarget } from "../ports/proxy.js";
import { bearerKey, type SandboxRow } from "@den/control-plane";
import type { EnvdPortTraffic } from "./envd/index.js";
import type { E2bTokens } from "./tokens.js";

/** envd's own port: a request naming it is envd's. */
export const ENVD_PORT = 49983;
const PORT_HEADER = "e2b-sandbox-port";
const ID_HEADER = "e2b-sandbox-id";
const TRAFFIC_HEADER = "e2b-traffic-access-token";
/** What the guest never sees of a request: the routing headers and envd's and Den's credentials. */
const DROPPED = ["e2b-sandbox-id", PORT_HEADER, "x-access-token", "x-api-key"];
/** A bearer of this shape is a Den key (valid or not): it never enters a sandbox. */
const DEN_KEY_SHAPE = /^(den|e2b)_/;

function header(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A refusal, in few words: the client reads the status (502: its TimeoutError, 404, 401). */
function failText(res: http.ServerResponse, e: DenError): void {
  const status = statusOf(e);
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" }).end(`${e.message}\n`);
}

/** E2B's edge answers 502 for a port nothing listens on and a sandbox that is not running. */
function statusOf(e: DenError): number {
  if (e.code === "connection_refused" || e.code === "sandbox_not_running" || e.code === "sandbox_destroyed") return 502;
  return e.status;
}

export class E2bPortTraffic implements EnvdPortTraffic {
  constructor(private readonly cp: ControlPlane, private readonly proxy: PortProxy, private readonly tokens: E2bTokens) {}

  /** The port a request names, when it is not envd's; "bad" for a header that is no port. */
  private portOf(req: http.IncomingMessage): number | "bad" | undefined {
    const raw = header(req, PORT_HEADER)?.trim();
    if (raw === undefined || raw === "" || raw === String(ENVD_PORT)) return undefined;
    const port = /^\d{1,5}$/.test(raw) ? Number(raw) : NaN;
    return port >= 1 && port <= 65535 ? port : "bad";
  }

  request(req: http.IncomingMessage, res: http.ServerResponse): boolean {
    const port = this.portOf(req);
    if (port === undefined) return false;
    void this.serve(req, res, port);
    return true;
  }

  upgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): boolean {
    const port = this.portOf(req);
    if (port === undefined) return false;
    void this.spliceUpgrade(req, socket, head, port);
    return true;
  }

  private async serve(req: http.IncomingMessage, res: http.ServerResponse, port: number | "bad"): Promise<void> {
    let routed: { t: PortTarget; grant: Grant; o: Omit<ForwardOptions, "fail"> };
    try {
      routed = await this.route(req, port);
    } catch (e) {
      if (!res.headersSent) failText(res, e instanceof DenError ? e : new DenError("internal", "internal error"));
      return;
    }
    await this.proxy.forward(req, res, routed.t, routed.grant, { ...routed.o, fail: failText });
  }

  private async spliceUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer, port: number | "bad"): Promise<void> {
    socket.on("error", () => undefined);
    try {
      const { t, grant, o } = await this.route(req, port);
      await this.proxy.splice(req, socket, head, t, grant, o);
    } catch (e) {
      const err = e instanceof DenError ? e : new DenError("internal", "internal error");
      const status = statusOf(err);
      const body = `${err.message}\n`;
      socket.end(`HTTP/1.1 ${status} Error\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    }
  }

  /** Which sandbox and port, whether the request may use it, and what the guest gets. */
  private async route(req: http.IncomingMessage, port: number | "bad"): Promise<{ t: PortTarget; grant: Grant; o: Omit<ForwardOptions, "fail"> }> {
    if (port === "bad") throw new DenError("invalid_argument", "E2b-Sandbox-Port must be a port number (1-65535)");
    const id = header(req, ID_HEADER) ?? "";
    let row = await this.cp.sandbox(id);
    if (!row || row.state === "destroyed") throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(id.slice(0, 64))} does not exist`);
    const grant = await this.authorize(req, row);
    // Running code is a command: as E2B's code server does, it takes the sandbox's envd
    // token (the client sends it on /execute only), not just a sandbox id and public ports.
    if (port === CODE_PORT && grant.via !== "key" && (req.url ?? "/").split("?")[0] === "/execute" && !this.tokens.check("envd", row.id, header(req, "x-access-token"))) {
      throw new DenError("unauthorized", "running code needs the sandbox's envd access token (X-Access-Token, the create call's envdAccessToken)");
    }
    // E2B's pause: a sandbox made with autoResume wakes for its traffic (as for envd), another
    // stays paused (502). A /v1 sandbox wakes for its ports as on the port proxy's routes.
    if (row.surface === "e2b") row = await this.cp.guests.autoResume(row);
    const drop = new Set(DROPPED);
    const auth = bearerKey(header(req, "authorization"));
    if (grant.via === "key" || (auth && DEN_KEY_SHAPE.test(auth))) drop.add("authorization");
    const add: Array<[string, string]> = [];
    if (port === CODE_PORT) {
      // Den's code server applies the sandbox's env; only Den says what it is.
      drop.add(SANDBOX_ENV_HEADER.toLowerCase());
      add.push([SANDBOX_ENV_HEADER, sandboxEnvHeader(envOf(row))]);
    }
    const t: PortTarget = { sandbox: row.id, port, guestPath: req.url ?? "/", prefix: "", bare: false, token: undefined };
    return { t, grant, o: { drop, add } };
  }

  /**
   * E2B's rule for port traffic: none needed when the sandbox's ports are public, else its
   * traffic token. An owner's Den key (`Authorization: Bearer` or `X-API-Key`) opens it too;
   * another owner's key finds no such sandbox.
   */
  private async authorize(req: http.IncomingMessage, row: SandboxRow): Promise<Grant> {
    const key = bearerKey(header(req, "authorization")) ?? header(req, "x-api-key");
    const principal = await this.cp.keys.principal(key);
    if (principal) {
      if (principal.owner !== row.owner) throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(row.id)} does not exist`);
      return { owner: row.owner, via: "key" };
    }
    if (row.public_ports === 1 || this.tokens.check("traffic", row.id, header(req, TRAFFIC_HEADER))) return { owner: row.owner, via: "public" };
    throw new DenError("unauthorized", "this sandbox's ports are not public: send E2B-Traffic-Access-Token (the create call's trafficAccessToken)");
  }
}

function envOf(row: SandboxRow): Record<string, string> {
  try {
    return JSON.parse(row.env) as Record<string, string>;
  } catch {
    return {};
  }
}
