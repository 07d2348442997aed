/** Den's MCP server: every tool, over whichever transport the caller connects it to. */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { DenClient, Sandbox, type DenClientOptions } from "@den/sdk";
import { registerTools, type DenAccess } from "./tools/define.js";
import { checkpointSandbox, createSandbox, destroySandbox, forkSandbox, getPortUrl, hibernateSandbox, listSandboxes, restoreCheckpoint, wakeSandbox } from "./tools/sandboxes.js";
import { exec } from "./tools/exec.js";
import { runCode } from "./tools/code.js";
import { listFiles, readFile, writeFile } from "./tools/files.js";

export const TOOLS = [
  createSandbox, listSandboxes, exec, runCode, readFile, writeFile, listFiles,
  hibernateSandbox, wakeSandbox, checkpointSandbox, restoreCheckpoint, forkSandbox, destroySandbox, getPortUrl,
];

const INSTRUCTIONS =
  "Den gives you Linux sandboxes (microVMs) that keep their state across calls. Create one with create_sandbox, then use its id with exec and the file tools; " +
  "hibernate_sandbox it while you wait on something long, checkpoint_sandbox before a risky step, and destroy_sandbox it when the task is done. " +
  "For notebook-style Python (state kept between calls, plots returned as images), create it from the template code-interpreter-v1 and use run_code.";

/**
 * An MCP server whose tools act on Den through the TypeScript SDK with `options` (the API's
 * URL and a key; by default DEN_API_URL and DEN_API_KEY). Throws `DenConfigError` at once
 * when they are unusable (no key, not an http(s) URL), not at the first tool call.
 */
export function createDenMcpServer(options: DenClientOptions = {}): McpServer {
  const client = new DenClient(options);
  const den: DenAccess = {
    client,
    sandbox: (id, signal) => Sandbox.connect(id, { ...options, signal }),
  };
  const server = new McpServer({ name: "den", version: "0.1.0" }, { instructions: INSTRUCTIONS, capabilities: { tools: {} } });
  registerTools(server, den, TOOLS);
  return server;
}
