/**
 * `/mcp`: Den's MCP server over Streamable HTTP (`@den/mcp`), stateless. The request is
 * authenticated as /v1 is, before any MCP handling; its tools then call /v1 on this server's
 * own listener through the SDK with the caller's key, so what a key may do and see through
 * MCP is exactly what it may through /v1 (one code path for auth, ownership, quotas and
 * limits; the MCP layer holds no privilege of its own).
 */
import type { AddressInfo } from "node:net";
import type { FastifyInstance, FastifyRequest, onRequestAsyncHookHandler } from "fastify";
import { handleStreamableHttp } from "@den/mcp";
import type { ControlPlane } from "@den/control-plane";
import { bearerKey } from "@den/control-plane";
import { fetchWithHost } from "../mcp/self-fetch.js";

export const MCP_PATH = "/mcp";

/** This server's own /v1, at the address it listens on (a wildcard one reached over loopback). */
function selfUrl(app: FastifyInstance): string {
  const a = app.server.address() as AddressInfo;
  const host = a.address === "0.0.0.0" ? "127.0.0.1" : a.address === "::" ? "::1" : a.address;
  return `http://${host.includes(":") ? `[${host}]` : host}:${a.port}`;
}

export function registerMcpRoutes(app: FastifyInstance, cp: ControlPlane, authenticate: onRequestAsyncHookHandler): void {
  // A JSON-RPC body is bounded as every Den request body is (DEN_MAX_BODY_BYTES); write_file's content travels in it.
  app.post(MCP_PATH, { schema: { hide: true }, bodyLimit: cp.config.limits.bodyBytes, onRequest: authenticate }, async (req: FastifyRequest, reply) => {
    // The transport writes the response itself (JSON or an SSE stream).
    reply.hijack();
    try {
      await handleStreamableHttp(req.raw, reply.raw, req.body, {
        apiUrl: selfUrl(app),
        apiKey: bearerKey(req.headers.authorization)!,
        fetch: fetchWithHost(req.headers.host),
      });
    } catch (err) {
      // Past hijack() Fastify's error handler cannot answer: do what it would have.
      req.log.error({ err }, "MCP request failed");
      if (!reply.raw.headersSent) reply.raw.writeHead(500, { "content-type": "application/json" }).end(JSON.stringify({ error: { code: "internal", message: "internal error" } }));
      else reply.raw.destroy();
    }
  });
  // Stateless: no server-initiated stream (GET) and no session to end (DELETE). The MCP
  // spec has a 405 say so; clients then carry on with POSTs alone.
  app.route({
    method: ["GET", "DELETE"], url: MCP_PATH, schema: { hide: true }, onRequest: authenticate,
    handler: async (_req, reply) => reply.status(405).header("allow", "POST").send({ jsonrpc: "2.0", error: { code: -32000, message: "Method not allowed: this server is stateless; POST requests only" }, id: null }),
  });
}
