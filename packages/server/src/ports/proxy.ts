import http from "node:http";
import type { Duplex } from "node:stream";
import { DenError } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import type { PortTokens } from "./tokens.js";
import { bearerKey } from "@den/control-plane";
import { portOrigin } from "./origins.js";
import { CODE_PORT } from "./code-port.js";
import { OwnerSlots } from "@den/control-plane";

/** The query parameter and cookie a signed port URL's token travels in. */
export const TOKEN_PARAM = "den_token";
const TOKEN_COOKIE = "den_token";
/** The same, host-only by the browser's rule (Secure, Path=/, no Domain), where the page is a secure context. */
const HOST_TOKEN_COOKIE = "__Host-den_token";
/**
 * What a guest's response may not do on the API's origin (the path route, reached with a
 * key): run script or share the origin (`sandbox`), widen a service worker's scope, set
 * cookies there, or be sniffed into something else.
 */
const API_ORIGIN_HEADERS = ["Content-Security-Policy", "sandbox", "X-Content-Type-Options", "nosniff", "Cross-Origin-Resource-Policy", "same-origin"];
const DROPPED_ON_API_ORIGIN = new Set(["set-cookie", "service-worker-allowed", "content-security-policy", "x-content-type-options", "cross-origin-resource-policy", "access-control-allow-origin", "access-control-allow-credentials"]);

const PATH_ROUTE = /^\/v1\/sandboxes\/(sbx_[a-z2-7]{16})\/ports\/(\d{1,5})(\/[^?]*)?(?:\?(.*))?$/;
const VHOST = /^(\d{1,5})-sbx[-_]([a-z2-7]{16})\.(.+)$/;
const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"]);

/** A request meant for a port of a sandbox. */
export interface PortTarget {
  sandbox: string;
  port: number;
  /** Path and query to send to the guest's server (Den's token taken out). */
  guestPath: string;
  /** What the request's path starts with on Den's side ("" for a virtual host). */
  prefix: string;
  /** The path route without even a "/" after the port. */
  bare: boolean;
  token: string | undefined;
}

/** Finds the sandbox and port a request is for: the path route or a virtual host. */
export function matchPortRequest(req: http.IncomingMessage, domain: string): PortTarget | undefined {
  const url = req.url ?? "/";
  const m = PATH_ROUTE.exec(url);
  let sandbox: string;
  let port: number;
  let path: string;
  let query: string;
  let prefix = "";
  let bare = false;
  if (m) {
    sandbox = m[1]!;
    port = Number(m[2]);
    path = m[3] ?? "/";
    bare = m[3] === undefined;
    query = m[4] ?? "";
    prefix = `/v1/sandboxes/${sandbox}/ports/${port}`;
  } else {
    const host = (req.headers.host ?? "").toLowerCase().replace(/:\d+$/, "");
    const v = VHOST.exec(host);
    if (!v || v[3] !== domain.toLowerCase()) return undefined;
    sandbox = `sbx_${v[2]}`;
    port = Number(v[1]);
    const q = url.indexOf("?");
    path = q < 0 ? url : url.slice(0, q);
    query = q < 0 ? "" : url.slice(q + 1);
  }
  if (port < 1 || port > 65535) return undefined;
  const params = new URLSearchParams(query);
  const token = params.get(TOKEN_PARAM) ?? undefined;
  params.delete(TOKEN_PARAM);
  const rest = params.toString();
  return { sandbox, port, guestPath: path + (rest ? `?${rest}` : ""), prefix, bare, token };
}

function cookieToken(req: http.IncomingMessage): string | undefined {
  for (const part of (req.headers.cookie ?? "").split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === TOKEN_COOKIE || k === HOST_TOKEN_COOKIE) return v.join("=");
  }
  return undefined;
}

/** A secure context, where a `__Host-` cookie is kept: HTTPS, or a `localhost` name (browsers trust loopback). */
function secureContext(req: http.IncomingMessage, host: string): boolean {
  const proto = String(req.headers["x-forwarded-proto"] ?? "").split(",")[0]!.trim();
  return proto === "https" || "encrypted" in req.socket || /(^|\.)localhost$/.test(host.replace(/:\d+$/, ""));
}

/** How a request proved it may use the port. */
export type Grant = { owner: string } & ({ via: "key" } | { via: "token"; token: string; fromQuery: boolean } | { via: "public" });

/** What a caller of `forward` changes in what reaches the guest, and how errors are answered. */
export interface ForwardOptions {
  /** Request headers (lower-case names) not passed to the guest, besides Den's own credentials. */
  drop?: ReadonlySet<string>;
  /** Headers added to the guest's request. */
  add?: Array<[string, string]>;
  /** Answers an error met before the guest's answer began (default: Den's JSON error body). */
  fail?: (res: http.ServerResponse, e: DenError) => void;
}

/** E2B's header for the ports of a sandbox that is not public. */
const TRAFFIC_HEADER = "e2b-traffic-access-token";

/**
 * Serves sandboxes' ports through Den: plain HTTP is forwarded request by request,
 * upgrades (WebSockets) and raw TCP (`Upgrade: den-tcp`, for `den forward`) are spliced
 * byte for byte. Each connection to the guest is a tunnel through its agent, so ports
 * work whatever the sandbox's egress policy. A hibernated sandbox wakes for the request.
 */
export class PortProxy {
  /** Connections to guests' ports open now, per owner: each holds buffers on this host. */
  private readonly open: OwnerSlots;

  constructor(
    private readonly cp: ControlPlane,
    private readonly tokens: PortTokens,
    readonly domain: string,
    maxPerOwner = 256,
    /** Checks an E2B traffic token of a sandbox (none: no E2B API). */
    private readonly trafficToken?: (sandbox: string, token: string | undefined) => boolean,
    /** Checks an E2B envd token of a sandbox: what running code on its port 49999 takes without a key. */
    private readonly envdToken?: (sandbox: string, token: string | undefined) => boolean,
  ) {
    this.open = new OwnerSlots(maxPerOwner, "connections to sandbox ports", "DEN_MAX_PORT_CONNECTIONS_PER_OWNER");
  }

  /** Counts a connection against its owner's limit; the returned function gives it back (once). */
  private claim(owner: string): () => void {
    return this.open.take(owner);
  }

  match(req: http.IncomingMessage): PortTarget | undefined {
    return matchPortRequest(req, this.domain);
  }

  /** The owner's key (never another's), or a valid signed token from the URL or its cookie. */
  private async authorize(req: http.IncomingMessage, t: PortTarget): Promise<Grant> {
    const key = bearerKey(req.headers.authorization);
    const principal = await this.cp.keys.principal(key);
    const row = await this.cp.sandbox(t.sandbox);
    if (principal) {
      // Another owner's sandbox does not exist for them.
      if (!row || row.owner !== principal.owner) throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(t.sandbox)} does not exist`);
      return { owner: row.owner, via: "key" };
    }
    const now = Date.now();
    // The path route takes a token only from its URL (it then sends the browser to the port's own host).
    const tokens = t.prefix === "" ? ([[t.token, true], [cookieToken(req), false]] as const) : ([[t.token, true]] as const);
    for (const [token, fromQuery] of tokens) {
      if (token && this.tokens.verify(token, t.sandbox, t.port, now)) {
        if (!row) throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(t.sandbox)} does not exist`);
        return { owner: row.owner, via: "token", token, fromQuery };
      }
    }
    // E2B's ports: public unless made otherwise, else its traffic token; on a virtual host only,
    // so that nothing unauthenticated ever shows guest content on the API's own origin.
    if (row && t.prefix === "") {
      const traffic = req.headers[TRAFFIC_HEADER];
      if (row.public_ports === 1 || this.trafficToken?.(row.id, typeof traffic === "string" ? traffic : undefined)) {
        // Running code is a command: it takes the sandbox's envd token too (older code-interpreter clients come this way).
        const access = req.headers["x-access-token"];
        if (t.port === CODE_PORT && t.guestPath.split("?")[0] === "/execute" && !this.envdToken?.(row.id, typeof access === "string" ? access : undefined)) {
          throw new DenError("unauthorized", "running code needs the sandbox's envd access token (X-Access-Token, the create call's envdAccessToken)");
        }
        return { owner: row.owner, via: "public" };
      }
    }
    if (t.token) throw new DenError("unauthorized", "the port URL's token is invalid or has expired");
    throw new DenError("unauthorized", "a port needs the owner's API key (Authorization: Bearer <key>) or a signed URL");
  }

  /** Headers for the guest's server: Den's own credentials removed, forwarding headers added. */
  private guestHeaders(req: http.IncomingMessage, t: PortTarget, grant: Grant, keepUpgrade: boolean, o: ForwardOptions = {}): Array<[string, string]> {
    const out: Array<[string, string]> = [];
    const raw = req.rawHeaders;
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const name = raw[i]!;
      const lower = name.toLowerCase();
      let value = raw[i + 1]!;
      if (lower === "authorization" && grant.via === "key") continue; // a Den key never enters a sandbox
      if (lower === TRAFFIC_HEADER) continue; // a credential of Den's, like the key
      if (o.drop?.has(lower)) continue;
      if (!keepUpgrade && HOP_BY_HOP.has(lower)) continue;
      if (lower.startsWith("x-forwarded-")) continue;
      if (lower === "cookie") {
        value = value.split(";").map((c) => c.trim()).filter((c) => c && !c.startsWith(`${TOKEN_COOKIE}=`) && !c.startsWith(`${HOST_TOKEN_COOKIE}=`)).join("; ");
        if (!value) continue;
      }
      out.push([name, value]);
    }
    out.push(["X-Forwarded-For", req.socket.remoteAddress ?? ""], ["X-Forwarded-Proto", "http"]);
    if (req.headers.host) out.push(["X-Forwarded-Host", req.headers.host]);
    if (t.prefix) out.push(["X-Forwarded-Prefix", t.prefix]);
    if (o.add) out.push(...o.add);
    return out;
  }

  /** A signed URL's token is kept as a cookie, so the page's own requests (assets, XHR) pass too. */
  private tokenCookie(req: http.IncomingMessage, t: PortTarget, grant: Grant): string | undefined {
    if (grant.via !== "token" || !grant.fromQuery || t.prefix !== "") return undefined;
    const exp = Number(grant.token.split(".")[0]);
    // Host-only either way (no Domain): another sandbox's port host never gets it.
    const attrs = `Path=/; Expires=${new Date(exp * 1000).toUTCString()}; HttpOnly; SameSite=Strict`;
    return secureContext(req, req.headers.host ?? "") ? `${HOST_TOKEN_COOKIE}=${grant.token}; ${attrs}; Secure` : `${TOKEN_COOKIE}=${grant.token}; ${attrs}`;
  }

  /**
   * A signed URL a browser navigates to on the path route: it goes to the same path on the
   * port's own host, where the app may run. Other clients (curl, scripts) are answered
   * here, sandboxed like every guest answer on this origin.
   */
  private redirectToOrigin(req: http.IncomingMessage, res: http.ServerResponse, t: PortTarget, grant: Grant): boolean {
    if (t.prefix === "" || grant.via !== "token" || req.headers["sec-fetch-mode"] !== "navigate") return false;
    const to = new URL(t.guestPath, portOrigin(this.cp.config, req.headers.host, t.sandbox, t.port));
    to.searchParams.set(TOKEN_PARAM, grant.token);
    res.writeHead(307, { location: to.toString(), "cache-control": "no-store", "referrer-policy": "no-referrer" }).end();
    return true;
  }

  private async tunnel(t: PortTarget): Promise<Duplex> {
    const guest = await this.cp.guests.reach(t.sandbox);
    try {
      return await guest.tunnel(t.port);
    } catch (e) {
      if (e instanceof DenError && e.code === "connection_refused") {
        throw new DenError("connection_refused", `nothing listens on port ${t.port} in sandbox ${t.sandbox}`);
      }
      throw e;
    }
  }

  /** Serves one HTTP request of the path route or a virtual host: auth, then `forward`. */
  async handle(req: http.IncomingMessage, res: http.ServerResponse, t: PortTarget): Promise<void> {
    let grant: Grant;
    try {
      grant = await this.authorize(req, t);
      if (this.redirectToOrigin(req, res, t, grant)) return;
      if (t.bare) {
        // Relative links of the app resolve under the port's path only with a trailing slash.
        const q = t.guestPath.indexOf("?");
        res.writeHead(308, { location: `${t.prefix}/${q < 0 ? "" : t.guestPath.slice(q)}` }).end();
        return;
      }
    } catch (e) {
      sendError(res, e);
      return;
    }
    await this.forward(req, res, t, grant);
  }

  /**
   * Forwards one HTTP request, already authorized by `grant`, to the guest's server on the
   * target port: the request's body and the guest's answer stream through as they come
   * (nothing buffered), the connection counts against the owner's limit, the sandbox is
   * active (and woken, if hibernated) while it lasts.
   */
  async forward(req: http.IncomingMessage, res: http.ServerResponse, t: PortTarget, grant: Grant, o: ForwardOptions = {}): Promise<void> {
    const failed = (e: unknown) => {
      if (o.fail && !res.headersSent) o.fail(res, asDenError(e));
      else sendError(res, e);
    };
    try {
      const release = this.claim(grant.owner);
      res.on("close", release);
      await this.cp.activity.withExec(t.sandbox, async () => {
        const tunnel = await this.tunnel(t);
        await new Promise<void>((resolve) => {
          const preq = http.request({
            method: req.method, path: t.guestPath, headers: headerObject(this.guestHeaders(req, t, grant, false, o)),
            createConnection: () => tunnel as never,
          });
          const fail = (e: Error) => {
            tunnel.destroy();
            if (!res.headersSent) failed(e instanceof DenError ? e : new DenError("agent_unavailable", `port ${t.port}: ${e.message}`));
            else res.destroy();
            resolve();
          };
          preq.on("error", fail);
          preq.on("response", (pres) => {
            const headers: string[] = [];
            const onApiOrigin = t.prefix !== "";
            for (let i = 0; i + 1 < pres.rawHeaders.length; i += 2) {
              const name = pres.rawHeaders[i]!.toLowerCase();
              if (HOP_BY_HOP.has(name) || (onApiOrigin && DROPPED_ON_API_ORIGIN.has(name))) continue;
              headers.push(pres.rawHeaders[i]!, pres.rawHeaders[i + 1]!);
            }
            if (onApiOrigin) headers.push(...API_ORIGIN_HEADERS);
            const cookie = this.tokenCookie(req, t, grant);
            // The token is in this page's URL: its links must not hand it to other sites.
            if (cookie) headers.push("Set-Cookie", cookie, "Referrer-Policy", "same-origin");
            res.writeHead(pres.statusCode ?? 502, pres.statusMessage, headers);
            // Now, not with the first body chunk: a stream's client waits on the headers (a silent cell's, a long poll's).
            res.flushHeaders();
            pres.pipe(res);
            pres.on("error", fail);
          });
          res.on("close", () => {
            tunnel.destroy();
            resolve();
          });
          req.pipe(preq);
        });
      });
    } catch (e) {
      failed(e);
    }
  }

  /**
   * An upgrade: `den-tcp` on the bare path route splices the client's connection to the
   * port (for `den forward`); any other (WebSockets) is passed to the guest's server,
   * which answers it itself.
   */
  async upgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer, t: PortTarget): Promise<void> {
    socket.on("error", () => undefined);
    try {
      const grant = await this.authorize(req, t);
      if (t.prefix !== "" && grant.via === "token") throw new DenError("forbidden", "a signed URL opens a port's WebSockets on the port's own host, not under /v1");
      checkOrigin(req);
      const rawTcp = t.bare && (req.headers.upgrade ?? "").toLowerCase() === "den-tcp";
      if (t.bare && !rawTcp) throw new DenError("invalid_argument", `upgrade to ${JSON.stringify(req.headers.upgrade)} needs a path after the port (${t.prefix}/...)`);
      await this.splice(req, socket, head, t, grant, {}, rawTcp);
    } catch (e) {
      const err = asDenError(e);
      const body = JSON.stringify({ error: { code: err.code, message: err.message } });
      socket.end(`HTTP/1.1 ${err.status} ${http.STATUS_CODES[err.status] ?? "Error"}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    }
  }

  /**
   * Splices an upgrade, already authorized by `grant`, to the target port: the request goes
   * to the guest's server, which answers it itself (`rawTcp`: Den answers 101 and the bytes
   * go to the port as they are). Throws, having written nothing, when the port cannot be reached.
   */
  async splice(req: http.IncomingMessage, socket: Duplex, head: Buffer, t: PortTarget, grant: Grant, o: Omit<ForwardOptions, "fail"> = {}, rawTcp = false): Promise<void> {
    const release = this.claim(grant.owner);
    socket.on("close", release);
    const tunnel = await this.tunnel(t);
    tunnel.on("error", () => socket.destroy());
    if (rawTcp) {
      socket.write("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: den-tcp\r\n\r\n");
    } else {
      const lines = [`${req.method} ${t.guestPath} HTTP/1.1`, ...this.guestHeaders(req, t, grant, true, o).map(([k, v]) => `${k}: ${v}`)];
      tunnel.write(lines.join("\r\n") + "\r\n\r\n");
    }
    if (head.length) tunnel.write(head);
    socket.pipe(tunnel);
    tunnel.pipe(socket);
    // A spliced connection is activity for as long as it lasts.
    void this.cp.activity.withExec(t.sandbox, () => new Promise<void>((resolve) => {
      socket.on("close", () => {
        tunnel.destroy();
        resolve();
      });
      tunnel.on("close", () => socket.destroy());
    }));
  }
}

/**
 * A browser's WebSocket to a port must come from a page of that same port host: a page on
 * another sandbox's port (the same site, for cookies) must not drive this one's socket.
 * Clients that send no Origin (not browsers) pass.
 */
function checkOrigin(req: http.IncomingMessage): void {
  const origin = req.headers.origin;
  if (origin === undefined) return;
  let host: string | undefined;
  try {
    host = new URL(origin).host;
  } catch {
    host = undefined;
  }
  if (host === undefined || host.toLowerCase() !== (req.headers.host ?? "").toLowerCase()) {
    throw new DenError("forbidden", `a WebSocket to this port must come from a page of ${req.headers.host ?? "its own host"}, not ${origin.slice(0, 200)}`);
  }
}

function headerObject(pairs: Array<[string, string]>): http.OutgoingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of pairs) {
    const key = k.toLowerCase();
    const cur = out[key];
    out[key] = cur === undefined ? v : [...[cur].flat(), v];
  }
  return out;
}

function asDenError(e: unknown): DenError {
  if (e instanceof DenError) return e;
  return new DenError("internal", "internal error");
}

function sendError(res: http.ServerResponse, e: unknown): void {
  const err = asDenError(e);
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(err.status, { "content-type": "application/json; charset=utf-8" }).end(JSON.stringify({ error: { code: err.code, message: err.message } }));
}
