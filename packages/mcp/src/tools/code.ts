/**
 * run_code: runs code in a sandbox's code interpreter (a sandbox made from
 * `code-interpreter-v1`) through the SDK's `runCode`, keeping a bounded part of stdout, stderr
 * and the results' text (see OutputCap); images come back as MCP image content (a few, each
 * bounded), the rest described. An exception the code raised is a tool error with its
 * traceback. Cancelling the call hangs up, and Den interrupts the run.
 */
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { DenApiError, type Execution, type ExecutionResult } from "@den/sdk";
import { OutputCap } from "../output-cap.js";
import * as schemas from "../schemas.js";
import { tool } from "./define.js";
import { reportProgress } from "./exec.js";

/** Images a call returns as image content at most, and the largest one (base64 characters); others are only described. */
export const MAX_IMAGES = 4;
export const MAX_IMAGE_B64 = 2 * 1024 * 1024;

const IMAGE_MIME = { png: "image/png", jpeg: "image/jpeg" } as const;
const OTHER_MIME = { svg: "image/svg+xml", pdf: "application/pdf", html: "text/html", markdown: "text/markdown", latex: "text/latex", javascript: "application/javascript" } as const;

function formats(r: ExecutionResult): string[] {
  return (["text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript"] as const).filter((k) => r[k] !== undefined);
}

export const runCode = tool({
  name: "run_code",
  description:
    "Run code (Python by default) in a code-interpreter sandbox, like a notebook cell: variables, imports and files persist between calls, and the last " +
    "expression's value is returned. Returns stdout, stderr, the results (text; plots and images as images) and the exception's traceback if it raised. " +
    "The sandbox must come from the template code-interpreter-v1 (create_sandbox with template: code-interpreter-v1). The code is interrupted after " +
    "timeout_ms (default 120000). Output past max_output_bytes keeps its start and end and marks what was dropped.",
  input: schemas.RunCode,
  annotations: { title: "Run code", readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  async run(args, den, extra) {
    const sbx = await den.sandbox(args.sandbox_id, extra.signal);
    const stop = reportProgress(extra, Date.now());
    const out = new OutputCap(args.max_output_bytes);
    const err = new OutputCap(args.max_output_bytes);
    const enc = new TextEncoder();
    try {
      let execution: Execution;
      let failure: DenApiError | undefined;
      try {
        execution = await sbx.runCode(args.code, {
          signal: extra.signal,
          timeoutMs: args.timeout_ms,
          ...(args.language !== undefined ? { language: args.language } : {}),
          ...(args.context_id !== undefined ? { context: args.context_id } : {}),
          ...(args.env_vars !== undefined ? { envs: args.env_vars } : {}),
          onStdout: (s) => out.push(enc.encode(s)),
          onStderr: (s) => err.push(enc.encode(s)),
        });
      } catch (e) {
        // A run cut short (timeout, a lost connection) still reports what it printed.
        const partial = e instanceof DenApiError ? (e.details?.execution as Execution | undefined) : undefined;
        if (!partial) throw e;
        execution = partial;
        failure = e as DenApiError;
      }
      return render(execution, out, err, args.max_output_bytes, failure);
    } finally {
      stop();
    }
  },
});

function render(execution: Execution, out: OutputCap, err: OutputCap, maxBytes: number, failure: DenApiError | undefined): CallToolResult {
  const resultsText = new OutputCap(maxBytes);
  const enc = new TextEncoder();
  const content: CallToolResult["content"] = [];
  const images: CallToolResult["content"] = [];
  const described: Array<Record<string, unknown>> = [];
  execution.results.forEach((r, i) => {
    const lines: string[] = [`--- result ${i + 1}${r.isMainResult ? " (the cell's value)" : ""} ---`];
    for (const [k, mime] of Object.entries(IMAGE_MIME) as Array<[keyof typeof IMAGE_MIME, string]>) {
      const data = r[k];
      if (data === undefined) continue;
      const size = Math.floor((data.length * 3) / 4) - (data.endsWith("==") ? 2 : data.endsWith("=") ? 1 : 0);
      if (images.length < MAX_IMAGES && data.length <= MAX_IMAGE_B64) {
        images.push({ type: "image", data, mimeType: mime });
        lines.push(`[${mime}, ${size} bytes: image ${images.length} below]`);
      } else {
        lines.push(`[${mime}, ${size} bytes: not returned (at most ${MAX_IMAGES} images of ${MAX_IMAGE_B64} base64 characters)]`);
      }
    }
    for (const [k, mime] of Object.entries(OTHER_MIME) as Array<[keyof typeof OTHER_MIME, string]>) {
      if (r[k] !== undefined && (k !== "html" || r.text === undefined)) lines.push(`[${mime}, ${r[k]!.length} characters]`);
    }
    if (r.text !== undefined) lines.push(r.text);
    else if (r.json !== undefined) lines.push(JSON.stringify(r.json));
    resultsText.push(enc.encode(lines.join("\n") + "\n"));
    described.push({ is_main_result: r.isMainResult, formats: formats(r), ...(r.text !== undefined ? { text: r.text.slice(0, maxBytes) } : {}) });
  });
  const stdout = out.text();
  const stderr = err.text();
  const results = resultsText.text();
  const e = execution.error;
  const status = failure ? `${failure.code}: ${failure.message}`
    : e ? `raised ${e.name}: ${e.value}` : `ok${execution.executionCount !== undefined ? ` (execution ${execution.executionCount})` : ""}`;
  const text = [
    status,
    ...(stdout ? ["--- stdout ---", stdout] : []),
    ...(stderr ? ["--- stderr ---", stderr] : []),
    ...(results ? [results.trimEnd()] : []),
    ...(e ? ["--- traceback ---", e.traceback || `${e.name}: ${e.value}`] : []),
  ].join("\n");
  content.push({ type: "text", text }, ...images);
  return {
    content,
    structuredContent: {
      stdout, stderr, results: described, error: e ?? null, execution_count: execution.executionCount ?? null,
      stdout_bytes: out.total, stderr_bytes: err.total, stdout_truncated: out.dropped > 0, stderr_truncated: err.dropped > 0,
      ...(failure ? { failure: { code: failure.code, message: failure.message } } : {}),
    },
    ...(e || failure ? { isError: true } : {}),
  };
}
