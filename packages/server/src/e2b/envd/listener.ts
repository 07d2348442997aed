/**
 * The envd listener's HTTP server: requests a `PortTraffic` takes (E2B's port traffic, named
 * by `E2b-Sandbox-Port`) never reach envd's routing; the rest go to Fastify. Its timeouts
 * let a quiet stream (a process, a long-running cell's answer) last as long as it needs.
 */
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";

/** Requests the listener hands on before envd routes them. */
export interface EnvdPortTraffic {
  /** Takes the request (true: it answers it) or leaves it to envd (false). */
  request(req: IncomingMessage, res: ServerResponse): boolean;
  /** The same for an upgrade; one not taken is refused. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean;
}

/** Between two requests of a kept-alive connection (as Fastify's default, beyond proxies' 60 s). */
const KEEP_ALIVE_MS = 72_000;
/** Headers must arrive within this; a body and an answer take as long as they take. */
const HEADERS_MS = 60_000;

/** The server for Fastify's `serverFactory`. */
export function envdHttpServer(handler: (req: IncomingMessage, res: ServerResponse) => void, traffic?: EnvdPortTraffic): http.Server {
  const server = http.createServer((req, res) => {
    if (!traffic?.request(req, res)) handler(req, res);
  });
  // No limit on a request's whole time (Node's default is 5 minutes: an upload to a port, a
  // slow client), none on a quiet socket; only idle kept-alive connections and slow headers end.
  server.requestTimeout = 0;
  server.headersTimeout = HEADERS_MS;
  server.keepAliveTimeout = KEEP_ALIVE_MS;
  server.setTimeout(0);
  if (traffic) {
    server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on("error", () => undefined);
      if (traffic.upgrade(req, socket, head)) return;
      const body = "envd does not upgrade connections";
      socket.end(`HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    });
  }
  return server;
}
