/**
 * Den's MCP server (`@den/mcp`): sandbox tools for AI agents, over stdio (`den mcp`) and
 * Streamable HTTP (`/mcp` on `den serve`), acting on Den through `@den/sdk`.
 *
 * @packageDocumentation
 */
export { createDenMcpServer, TOOLS } from "./server.js";
export { serveStdio } from "./stdio.js";
export { handleStreamableHttp } from "./http.js";
export { OutputCap } from "./output-cap.js";
export { errorCode } from "./result.js";
export * as schemas from "./schemas.js";
