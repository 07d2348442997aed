/** How a tool is declared: its name, an LLM-facing description, a zod input schema, and a handler whose failures become tool errors. */
import type { z } from "zod";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { RequestHandlerExtra } from "@modelcontextprotocol/sdk/shared/protocol.js";
import type { CallToolResult, ServerNotification, ServerRequest, ToolAnnotations } from "@modelcontextprotocol/sdk/types.js";
import type { DenClient, Sandbox } from "@den/sdk";
import { fail } from "../result.js";

export type ToolExtra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/** What every tool reaches Den with: the SDK's client, and how to open one sandbox through it. */
export interface DenAccess {
  client: DenClient;
  /** `Sandbox.connect` with the server's client options (the id is checked, and `sandbox_not_found` raised, here). */
  sandbox(id: string, signal: AbortSignal): Promise<Sandbox>;
}

export interface ToolSpec<S extends z.ZodObject> {
  name: string;
  description: string;
  input: S;
  annotations?: ToolAnnotations;
  run(args: z.output<S>, den: DenAccess, extra: ToolExtra): Promise<CallToolResult>;
}

/** Identity, for type inference of `run`'s arguments from `input`. */
export function tool<S extends z.ZodObject>(spec: ToolSpec<S>): ToolSpec<S> {
  return spec;
}

export function registerTools(server: McpServer, den: DenAccess, tools: ReadonlyArray<ToolSpec<z.ZodObject>>): void {
  for (const t of tools) {
    server.registerTool(t.name, { description: t.description, inputSchema: t.input, ...(t.annotations ? { annotations: t.annotations } : {}) }, async (args: unknown, extra: ToolExtra) => {
      try {
        return await t.run(args as z.output<typeof t.input>, den, extra);
      } catch (e) {
        return fail(e);
      }
    });
  }
}
