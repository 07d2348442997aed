/** `den mcp`: the server on this process's stdin and stdout, for an agent that spawns it. */
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { DenClientOptions } from "@den/sdk";
import { createDenMcpServer } from "./server.js";

/** Serves until stdin ends (the agent closed it or exited); resolves then. Nothing else may write to stdout meanwhile. */
export async function serveStdio(options: DenClientOptions = {}): Promise<void> {
  const server = createDenMcpServer(options);
  const ended = new Promise<void>((resolve) => {
    process.stdin.once("end", resolve);
    process.stdin.once("close", resolve);
  });
  await server.connect(new StdioServerTransport());
  await ended;
  await server.close();
}
