/**
 * One Streamable HTTP request (POST /mcp), stateless: a new server and transport per request,
 * so nothing outlives it and any replica can answer any request. The caller has authenticated
 * already; `options` carries the key its tools act with.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { DenClientOptions } from "@den/sdk";
import { createDenMcpServer } from "./server.js";

export async function handleStreamableHttp(req: IncomingMessage, res: ServerResponse, body: unknown, options: DenClientOptions): Promise<void> {
  const server = createDenMcpServer(options);
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  // A client that hangs up cancels its calls in flight (a streamed exec is then hung up, and killed by Den).
  res.once("close", () => {
    void transport.close();
    void server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res, body);
}
