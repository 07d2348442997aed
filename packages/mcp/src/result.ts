/**
 * What a tool answers: text for the model, plus `structuredContent` for programs. A failure is
 * an MCP tool error (`isError: true`) carrying Den's error code, in the text
 * (`sandbox_not_found: sandbox sbx_... not found`) and as Den's error body
 * (`{ error: { code, message } }`) in `structuredContent`.
 */
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { DenError } from "@den/protocol";
import { DenApiError, DenConfigError } from "@den/sdk";

export function ok(text: string, structured?: Record<string, unknown>): CallToolResult {
  return { content: [{ type: "text", text }], ...(structured ? { structuredContent: structured } : {}) };
}

/** Den's code and message for any failure of a tool (the SDK's typed errors keep the server's code). */
export function errorCode(e: unknown): { code: string; message: string } {
  if (e instanceof DenApiError || e instanceof DenError) return { code: e.code, message: e.message };
  if (e instanceof DenConfigError) return { code: "invalid_argument", message: e.message };
  if (e instanceof Error && e.name === "AbortError") return { code: "aborted", message: "the call was cancelled" };
  // fetch's "fetch failed" hides why in its cause (ECONNREFUSED and the like).
  const cause = (e as { cause?: { code?: unknown; message?: unknown } } | undefined)?.cause;
  const why = typeof cause?.code === "string" ? cause.code : typeof cause?.message === "string" ? cause.message : undefined;
  if (e instanceof TypeError && e.message === "fetch failed") return { code: "internal", message: `cannot reach the Den API${why ? ` (${why})` : ""}` };
  const message = e instanceof Error ? e.message : String(e);
  return { code: "internal", message: why ? `${message} (${why})` : message };
}

export function fail(e: unknown): CallToolResult {
  const { code, message } = errorCode(e);
  return { content: [{ type: "text", text: `${code}: ${message}` }], structuredContent: { error: { code, message } }, isError: true };
}
