/** What an RPC handler gets: the sandbox, its envd state, the caller's user, and the stream's knobs. */
import type { EnvdSandbox, EnvdStreamKind } from "./seam.js";
import type { EnvelopeStream } from "./connect.js";
import type { SandboxState } from "./state.js";

export interface RpcContext {
  sandboxId: string;
  sandbox: EnvdSandbox;
  state: SandboxState;
  user: string;
  /** `Connect-Timeout-Ms`, when sent. */
  timeoutMs: number | undefined;
}

export type UnaryHandler = (ctx: RpcContext, msg: unknown) => Promise<unknown>;
/** Writes to `out` until done; the caller ends the stream if the handler returns without ending it. */
export type StreamHandler = (ctx: RpcContext, msg: unknown, out: EnvelopeStream) => Promise<void>;

export interface Service {
  unary: Record<string, UnaryHandler>;
  /** `holds`: which of the owner's slots the stream takes while it lasts (EnvdSandbox.hold). */
  stream: Record<string, { handler: StreamHandler; keepalive: unknown; holds: EnvdStreamKind }>;
}
