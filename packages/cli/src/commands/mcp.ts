import type { Command } from "commander";

/**
 * `den mcp`: Den's MCP server on stdin/stdout, for an agent that spawns it (its MCP
 * configuration names `den mcp` with DEN_API_URL and DEN_API_KEY in its env). Runs until the
 * agent closes stdin.
 */
export function registerMcp(program: Command): void {
  program
    .command("mcp")
    .description("serve Den's sandbox tools to an AI agent over MCP on stdin/stdout (reaches Den at DEN_API_URL with DEN_API_KEY)")
    .action(async () => {
      const { serveStdio } = await import("@den/mcp");
      await serveStdio();
      // Idle keep-alive sockets to the API would hold the process a few seconds more.
      process.exit(0);
    });
}
