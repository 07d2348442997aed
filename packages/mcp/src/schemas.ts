/**
 * The tools' input schemas, derived from the /v1 body schemas in `@den/protocol` (`api`), so a
 * tool accepts exactly what its route does (same names, bounds and patterns) plus the ids the
 * route takes in its path. `.safeExtend` keeps a body's refinements (exec's "cmd or argv") and
 * its strictness (an unknown field is an error, as in /v1).
 */
import { z } from "zod";
import { api } from "@den/protocol";

/** What exec keeps of each output stream by default, and at most (the rest is dropped, and said so). */
export const DEFAULT_OUTPUT_BYTES = 64 * 1024;
export const MAX_OUTPUT_BYTES = 1024 * 1024;
/** How long exec lets a command run when the caller does not say: MCP clients give up on silent calls after a minute or two. */
export const DEFAULT_EXEC_TIMEOUT_SECONDS = 120;
/** What read_file returns by default, and at most. */
export const DEFAULT_READ_BYTES = 256 * 1024;
export const MAX_READ_BYTES = 4 * 1024 * 1024;
/** write_file's content, in characters (the /mcp request body is bounded as every Den body is). */
export const MAX_WRITE_CHARS = 8 * 1024 * 1024;

const sandboxId = api.SandboxId.describe("the sandbox's id (sbx_...), from create_sandbox or list_sandboxes");
const withSandbox = z.strictObject({ sandbox_id: sandboxId });
const path = api.GuestPath.describe("an absolute path inside the sandbox");
const encoding = z.enum(["utf8", "base64"]);

export const CreateSandbox = api.CreateSandboxRequest.safeExtend({
  template: api.CreateSandboxRequest.shape.template.describe("template name or name@version (default: base, a Debian with Python, git and build tools)"),
  persistent: api.CreateSandboxRequest.shape.persistent.describe("true: when idle it hibernates and keeps its state instead of being destroyed"),
  ttl_seconds: api.CreateSandboxRequest.shape.ttl_seconds.describe("hard deadline from now, in seconds (default 3600); null with persistent: none"),
  network: api.CreateSandboxRequest.shape.network.describe("egress policy; default none (no connection leaves the sandbox)"),
});

export const ListSandboxes = z.strictObject({
  state: api.SandboxState.optional().describe("only sandboxes in this state"),
  metadata: api.Metadata.optional().describe("only sandboxes whose metadata has all these key/value pairs"),
  limit: z.number().int().min(1).max(api.API_LIMITS.maxPageSize).default(50),
  cursor: z.string().max(64).optional().describe("next_cursor of the previous page"),
});

export const Exec = api.ExecRequest.safeExtend({
  sandbox_id: sandboxId,
  cmd: api.ExecRequest.shape.cmd.describe("a shell command line, run with bash -c (give cmd or argv)"),
  argv: api.ExecRequest.shape.argv.describe("or a program and its arguments, run without a shell"),
  timeout_seconds: api.ExecRequest.shape.timeout_seconds
    .unwrap()
    .default(DEFAULT_EXEC_TIMEOUT_SECONDS)
    .describe("kill the command (its whole process tree) after this many seconds; 0: no limit"),
  max_output_bytes: z
    .number().int().min(1024).max(MAX_OUTPUT_BYTES).default(DEFAULT_OUTPUT_BYTES)
    .describe("bytes kept per stream (stdout, stderr): its start and its end; the middle of a longer output is dropped and marked"),
});

export const ReadFile = withSandbox.extend({
  path,
  max_bytes: z.number().int().min(1).max(MAX_READ_BYTES).default(DEFAULT_READ_BYTES).describe("bytes returned at most, from the start; a longer file is marked truncated"),
  encoding: encoding.default("utf8").describe("utf8 for text, base64 for binary files"),
});

export const WriteFile = withSandbox.extend({
  path,
  content: z.string().max(MAX_WRITE_CHARS).describe("the whole new content of the file"),
  encoding: encoding.default("utf8").describe("how content is encoded: utf8 text or base64 bytes"),
});

export const ListFiles = withSandbox.extend({ path });

export const Hibernate = api.HibernateRequest.safeExtend({
  sandbox_id: sandboxId,
  mode: api.HibernateRequest.shape.mode.describe("warm (default): paused in place, wakes in milliseconds; cold: moved to the snapshot store, costs no CPU or RAM, wakes in about a second; disk: shut down keeping only its files"),
});

export const SandboxOnly = withSandbox;

export const Checkpoint = api.CreateCheckpointRequest.safeExtend({ sandbox_id: sandboxId });

export const Restore = api.RestoreCheckpointRequest.safeExtend({
  checkpoint_id: api.CheckpointId.describe("the checkpoint's id (snap_...), from checkpoint_sandbox"),
});

export const Fork = api.ForkRequest.safeExtend({
  sandbox_id: sandboxId,
  count: api.ForkRequest.shape.count.describe("how many copies (1 to 16, default 1)"),
});

export const PortUrl = api.CreatePortUrlRequest.safeExtend({
  sandbox_id: sandboxId,
  port: api.CreatePortUrlRequest.shape.port.describe("the TCP port a server listens on inside the sandbox"),
  expires_in_seconds: api.CreatePortUrlRequest.shape.expires_in_seconds.describe("how long the URL works (default 3600)"),
});

/** How long run_code lets code run when the caller does not say (as exec's default). */
export const DEFAULT_RUN_CODE_TIMEOUT_MS = 120_000;

export const RunCode = api.RunCodeRequest.safeExtend({
  sandbox_id: sandboxId.describe("the sandbox's id (sbx_...); it must be made from the template code-interpreter-v1 (create_sandbox with template code-interpreter-v1)"),
  code: api.RunCodeRequest.shape.code.max(MAX_WRITE_CHARS).describe("the code to run, as a notebook cell: the last expression's value is returned as a result"),
  language: api.RunCodeRequest.shape.language.describe("the language (default python); each language's default context keeps its state between calls. Not with context_id"),
  context_id: api.RunCodeRequest.shape.context_id.describe("run in this code context instead (its variables persist between calls)"),
  env_vars: api.RunCodeRequest.shape.env_vars.describe("environment variables for this run, on top of the sandbox's own"),
  timeout_ms: z.number().int().min(1000).max(api.API_LIMITS.maxExecTimeoutSeconds * 1000).default(DEFAULT_RUN_CODE_TIMEOUT_MS)
    .describe("interrupt the code after this many milliseconds (default 120000)"),
  max_output_bytes: z
    .number().int().min(1024).max(MAX_OUTPUT_BYTES).default(DEFAULT_OUTPUT_BYTES)
    .describe("bytes kept of stdout, of stderr and of the results' text: their start and their end; the middle of longer output is dropped and marked"),
});
