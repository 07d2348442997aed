/** A sandbox's ports: what listens inside, signed URLs to them, and raw TCP connections (Node). */
import http from "node:http";
import https from "node:https";
import type { Duplex } from "node:stream";
import { api } from "@den/protocol";
import { type DenClient, type RequestOptions, seg } from "./client.js";
import { apiError } from "./errors.js";

/**
 * A TCP port listening inside a sandbox: `port`, the `address` it is bound to in the guest
 * (every one is reachable through Den), `family`, and the `pid` and `process` holding it
 * when known.
 *
 * @example
 * ```ts
 * for (const p of await sbx.ports()) console.log(p.port, p.process);
 * ```
 */
export type ListeningPort = import("@den/protocol").ListeningPort;

/**
 * A signed URL to one port: anyone holding it reaches the port until `expiresAt`.
 *
 * @example
 * ```ts
 * const u = await sbx.createPortUrl(8000, { expiresInSeconds: 600 });
 * console.log(u.url); // http://8000-sbx-....localhost:8080/?den_token=...
 * ```
 */
export interface PortUrl {
  port: number;
  /** At `/` of the port's own host name (`{port}-sbx-{...}.<domain>`): the port's own origin, apart from the API's. */
  url: string;
  /** The same as `url` (its name before `url` became the port's own origin). */
  vhostUrl: string;
  /** Under the API's path (`.../v1/sandboxes/{id}/ports/{port}/?den_token=...`): a browser is redirected to `url`. */
  pathUrl: string;
  token: string;
  expiresAt: Date;
}

/** Options of {@link Sandbox.createPortUrl} and {@link Sandbox.getUrl}. */
export interface PortUrlOptions extends RequestOptions {
  /** How long the URL works (default 3600 s; the server caps it). */
  expiresInSeconds?: number;
}

export async function listPorts(client: DenClient, id: string, opts: RequestOptions = {}): Promise<ListeningPort[]> {
  const w = await client.json({ method: "GET", path: `/v1/sandboxes/${seg(id)}/ports`, signal: opts.signal }, api.ListPortsResponse.parse);
  return w.ports.map((p) => ({ ...p }));
}

export async function createPortUrl(client: DenClient, id: string, port: number, opts: PortUrlOptions = {}): Promise<PortUrl> {
  const body: Record<string, unknown> = { port };
  if (opts.expiresInSeconds !== undefined) body.expires_in_seconds = opts.expiresInSeconds;
  const w = await client.json({ method: "POST", path: `/v1/sandboxes/${seg(id)}/urls`, json: body, signal: opts.signal }, api.PortUrl.parse);
  return { port: w.port, url: w.url, vhostUrl: w.vhost_url, pathUrl: w.path_url, token: w.token, expiresAt: new Date(w.expires_at) };
}

/**
 * A raw TCP connection to a port inside the sandbox, through the API (an HTTP upgrade to
 * `den-tcp`): works whatever the sandbox's network policy, and wakes it if hibernated.
 */
export function connectPort(client: DenClient, id: string, port: number, opts: RequestOptions = {}): Promise<Duplex> {
  const url = new URL(`${client.apiUrl}/v1/sandboxes/${seg(id)}/ports/${port}`);
  const mod = url.protocol === "https:" ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(url, { headers: { ...client.authHeaders(), connection: "Upgrade", upgrade: "den-tcp" }, signal: opts.signal });
    req.on("upgrade", (_res, socket, head) => {
      if (head.length) socket.unshift(head);
      resolve(socket);
    });
    req.on("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c.slice(0, 4096)));
      res.on("end", () => {
        let err: { code?: string; message?: string } = {};
        try {
          err = (JSON.parse(text) as { error?: typeof err }).error ?? {};
        } catch {
          // not JSON
        }
        reject(apiError(err.code ?? "internal", err.message ?? `HTTP ${res.statusCode}`, res.statusCode ?? 500));
      });
    });
    req.on("error", reject);
    req.end();
  });
}
