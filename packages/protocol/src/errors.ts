/**
 * Error codes shared by the guest agent, the runtime driver, the server and the SDKs.
 * Each code maps to one HTTP status, so an SDK can turn a response back into a typed error.
 */
export const ERROR_STATUS = {
  invalid_argument: 400,
  unknown_op: 400,
  path_too_long: 400,
  unauthorized: 401,
  forbidden: 403,
  sandbox_not_found: 404,
  template_not_found: 404,
  snapshot_not_found: 404,
  proc_not_found: 404,
  file_not_found: 404,
  volume_not_found: 404,
  not_found: 404,
  /** A code context the sandbox's code interpreter does not have (never made, removed, or gone with a wake from cold). */
  context_not_found: 404,
  cwd_not_found: 400,
  not_a_directory: 400,
  is_a_directory: 400,
  unreadable: 400,
  already_exists: 409,
  not_empty: 409,
  /** A volume is mounted where the request needs it free: read-write elsewhere (or read-only, for a writer), or at all (a delete, a grow). */
  volume_in_use: 409,
  /** The sandbox's own disk is full (its guest said ENOSPC): the caller's to free, not a server fault. */
  disk_full: 409,
  permission_denied: 403,
  /** The deployment has no certificate authority (DEN_CA_DIR): it issues no join tokens or machine certificates. */
  ca_not_configured: 409,
  sandbox_not_running: 409,
  /** Nothing serves the code interpreter's port in the sandbox: it was not made from `code-interpreter-v1` (or a template built on it), or its server is down. */
  code_interpreter_unavailable: 409,
  exec_timeout: 408,
  quota_exceeded: 429,
  limit_exceeded: 429,
  payload_too_large: 413,
  route_not_found: 404,
  sandbox_destroyed: 410,
  invalid_state: 409,
  operation_in_progress: 409,
  snapshot_incompatible: 409,
  snapshot_corrupt: 422,
  setup_failed: 422,
  /** A disk or volume image whose header is not what Den made (a backing or data file it did not set, a feature it does not use): refused before anything opens it. */
  disk_corrupt: 422,
  /** An image reference names nothing (the registry said so), or an archive holds no image. */
  image_not_found: 404,
  /** An image could not be pulled: its registry is unreachable, refused the credentials, or stalled past a deadline. */
  image_pull_failed: 422,
  /** An image or archive is malformed, lies (a digest or size that does not match), or is over a limit. */
  image_invalid: 422,
  capacity_exhausted: 503,
  agent_unavailable: 503,
  agent_protocol_error: 502,
  connection_refused: 502,
  timeout: 504,
  /** The guest agent missed a deadline (a wedged or stopped agent): the sandbox is up, its guest is not answering. */
  guest_unresponsive: 504,
  aborted: 499,
  io_error: 500,
  qemu_error: 500,
  build_failed: 500,
  internal: 500,
} as const satisfies Record<string, number>;

export type ErrorCode = keyof typeof ERROR_STATUS;

export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === "string" && Object.hasOwn(ERROR_STATUS, code);
}

/**
 * The one error type Den throws on purpose: a stable `code`, a human message, and the
 * HTTP status the code maps to.
 *
 * @example
 * ```ts
 * try { await runtime.get("sbx_missing"); }
 * catch (e) { if (e instanceof DenError && e.code === "sandbox_not_found") { ... } }
 * ```
 */
export class DenError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details?: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>, options?: ErrorOptions) {
    super(message, options);
    this.name = "DenError";
    this.code = code;
    this.status = ERROR_STATUS[code];
    if (details) this.details = details;
  }

  /** Serializable form used on the wire. */
  toJSON(): { code: ErrorCode; message: string; details?: Record<string, unknown> } {
    return this.details ? { code: this.code, message: this.message, details: this.details } : { code: this.code, message: this.message };
  }
}

/**
 * Builds a DenError from a `{code, message, details}` on the wire (a guest agent's reply, a
 * host agent's error body), mapping unknown codes to `internal`.
 */
export function errorFromWire(code: unknown, message: unknown, details?: unknown): DenError {
  const msg = typeof message === "string" ? message.slice(0, 4096) : "unknown error";
  const d = details && typeof details === "object" && !Array.isArray(details) ? (details as Record<string, unknown>) : undefined;
  return new DenError(isErrorCode(code) ? code : "internal", msg, d);
}
