/**
 * Typed errors for the Den API. A non-2xx response with the body
 * `{ "error": { "code", "message" } }` becomes a {@link DenApiError}, or the subclass its
 * `code` maps to. Network errors and aborts are not wrapped: they propagate as `fetch`
 * raised them (an abort is a `DOMException` named `AbortError`).
 */

/**
 * Any error the Den API returned: the stable `code` (see `ERROR_STATUS` in `@den/protocol`),
 * the human `message` and the HTTP `status`. Codes the SDK has no subclass for (and codes it
 * does not know at all) are plain `DenApiError`s.
 *
 * @example
 * ```ts
 * try {
 *   await sbx.filesystem.read("/etc/shadow");
 * } catch (e) {
 *   if (e instanceof DenApiError) console.error(e.status, e.code, e.message);
 *   else throw e;
 * }
 * ```
 */
export class DenApiError extends Error {
  /**
   * The error code from the response body, e.g. `"sandbox_not_found"`.
   *
   * @example
   * ```ts
   * if (e instanceof DenApiError && e.code === "not_a_directory") console.log("expected a directory");
   * ```
   */
  readonly code: string;
  /**
   * The HTTP status of the response (for an `error` line inside a streamed exec, which arrives
   * in a 200 response: the status its code maps to in `ERROR_STATUS`, else 500).
   *
   * @example
   * ```ts
   * if (e instanceof DenApiError && e.status >= 500) await retryLater();
   * ```
   */
  readonly status: number;
  /**
   * Extra fields the server attached, if any.
   *
   * @example
   * ```ts
   * if (e instanceof DenApiError) console.log(e.details?.limit);
   * ```
   */
  readonly details?: Record<string, unknown>;

  /**
   * @example
   * ```ts
   * const e = new DenApiError("internal", "boom", 500);
   * ```
   */
  constructor(code: string, message: string, status: number, details?: Record<string, unknown>, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    if (details !== undefined) this.details = details;
  }
}

/**
 * 401 `unauthorized`: no key, a wrong key or a revoked key.
 *
 * @example
 * ```ts
 * try { await Sandbox.connect(id, { apiKey: "wrong" }); }
 * catch (e) { if (e instanceof UnauthorizedError) console.error("check DEN_API_KEY"); }
 * ```
 */
export class UnauthorizedError extends DenApiError {}

/**
 * 403 `forbidden` (e.g. a non-admin key on an admin route) or `permission_denied` (a guest
 * file the sandbox user may not touch).
 *
 * @example
 * ```ts
 * try { await Keys.list(); } catch (e) { if (e instanceof ForbiddenError) console.error("needs an admin key"); }
 * ```
 */
export class ForbiddenError extends DenApiError {}

/**
 * Any 404 the SDK knows: the base of {@link SandboxNotFoundError}, {@link FileNotFoundError},
 * {@link ProcessNotFoundError} and {@link TemplateNotFoundError}.
 *
 * @example
 * ```ts
 * try { await sbx.filesystem.stat("/nope"); } catch (e) { if (e instanceof NotFoundError) console.log(e.code); }
 * ```
 */
export class NotFoundError extends DenApiError {}

/**
 * 404 `sandbox_not_found`: no such sandbox, or one of another owner.
 *
 * @example
 * ```ts
 * try { await Sandbox.connect("sbx_aaaaaaaaaaaaaaaa"); }
 * catch (e) { if (e instanceof SandboxNotFoundError) console.log("gone"); }
 * ```
 */
export class SandboxNotFoundError extends NotFoundError {}

/**
 * 404 `file_not_found`: no such path inside the sandbox.
 *
 * @example
 * ```ts
 * const text = await sbx.filesystem.readText("/maybe").catch((e) => {
 *   if (e instanceof FileNotFoundError) return "";
 *   throw e;
 * });
 * ```
 */
export class FileNotFoundError extends NotFoundError {}

/**
 * 404 `proc_not_found`: no such background process.
 *
 * @example
 * ```ts
 * try { await sbx.processes.get(99); } catch (e) { if (e instanceof ProcessNotFoundError) console.log("no proc 99"); }
 * ```
 */
export class ProcessNotFoundError extends NotFoundError {}

/**
 * 404 `template_not_found`.
 *
 * @example
 * ```ts
 * try { await Sandbox.create({ template: "nope" }); }
 * catch (e) { if (e instanceof TemplateNotFoundError) console.log("build it first"); }
 * ```
 */
export class TemplateNotFoundError extends NotFoundError {}

/**
 * 400 `invalid_argument` (and `path_too_long`): the request did not validate.
 *
 * @example
 * ```ts
 * try { await sbx.setTimeout(0); } catch (e) { if (e instanceof InvalidArgumentError) console.log(e.message); }
 * ```
 */
export class InvalidArgumentError extends DenApiError {}

/**
 * 409/410 `invalid_state`, `operation_in_progress`, `sandbox_not_running` or `sandbox_destroyed`: the sandbox is not
 * in a state that allows the call (409 `code_interpreter_unavailable`: it has no code interpreter, as it was not
 * made from `code-interpreter-v1`).
 *
 * @example
 * ```ts
 * try { await sbx.exec("true"); } catch (e) { if (e instanceof InvalidStateError) console.log(sbx.state, e.code); }
 * ```
 */
export class InvalidStateError extends DenApiError {}

/**
 * 409 `already_exists` or `not_empty` (file operations), or `disk_full` (the sandbox's own disk); `ca_not_configured`: the deployment has no CA (DEN_CA_DIR).
 *
 * @example
 * ```ts
 * try { await sbx.filesystem.mkdir("/workspace"); } catch (e) { if (!(e instanceof ConflictError)) throw e; }
 * ```
 */
export class ConflictError extends DenApiError {}

/**
 * 429 `quota_exceeded`: too many sandboxes (or vCPUs, memory, …) for this key; `limit_exceeded`: too many template builds running at once.
 *
 * @example
 * ```ts
 * try { await Sandbox.create(); } catch (e) { if (e instanceof QuotaExceededError) await cleanUpOldSandboxes(); }
 * ```
 */
export class QuotaExceededError extends DenApiError {}

/**
 * 413 `payload_too_large`.
 *
 * @example
 * ```ts
 * try { await sbx.filesystem.write("/big", huge); } catch (e) { if (e instanceof PayloadTooLargeError) console.log("too big"); }
 * ```
 */
export class PayloadTooLargeError extends DenApiError {}

/**
 * 408 `exec_timeout` or 504 `timeout`: the server gave up waiting. (A buffered exec whose
 * command outlives `timeoutSeconds` normally resolves with `timedOut: true` instead.)
 *
 * Note: its `name` is `"TimeoutError"`, the same as the `DOMException` that
 * `AbortSignal.timeout()` raises; tell them apart with `instanceof`.
 *
 * @example
 * ```ts
 * try { await sbx.exec("sleep 100", { timeoutSeconds: 1 }); }
 * catch (e) { if (e instanceof TimeoutError) console.log("timed out:", e.code); }
 * ```
 */
export class TimeoutError extends DenApiError {}

/**
 * 503 `capacity_exhausted` or `agent_unavailable`: worth retrying later.
 *
 * @example
 * ```ts
 * try { await Sandbox.create(); } catch (e) { if (e instanceof UnavailableError) await sleep(1000); }
 * ```
 */
export class UnavailableError extends DenApiError {}

/**
 * The server's answer did not match the contract: not JSON, a body that fails the schema, an
 * NDJSON line over the size cap, or a stream that ended before its final line. `code` is
 * `"invalid_response"`.
 *
 * @example
 * ```ts
 * try { await sbx.refresh(); } catch (e) { if (e instanceof InvalidResponseError) console.error("proxy in the way?"); }
 * ```
 */
export class InvalidResponseError extends DenApiError {}

/**
 * The SDK is not configured: no API key in the options nor in `DEN_API_KEY`, or a bad `apiUrl`.
 * Thrown before any request is made.
 *
 * @example
 * ```ts
 * try { await Sandbox.create(); } catch (e) { if (e instanceof DenConfigError) console.error(e.message); }
 * ```
 */
export class DenConfigError extends Error {
  /**
   * @example
   * ```ts
   * throw new DenConfigError("no API key");
   * ```
   */
  constructor(message: string) {
    super(message);
    this.name = "DenConfigError";
  }
}

type ApiErrorClass = new (code: string, message: string, status: number, details?: Record<string, unknown>) => DenApiError;

const BY_CODE: Readonly<Record<string, ApiErrorClass>> = {
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  permission_denied: ForbiddenError,
  not_found: NotFoundError,
  route_not_found: NotFoundError,
  context_not_found: NotFoundError,
  snapshot_not_found: NotFoundError,
  sandbox_not_found: SandboxNotFoundError,
  file_not_found: FileNotFoundError,
  volume_not_found: NotFoundError,
  image_not_found: NotFoundError,
  proc_not_found: ProcessNotFoundError,
  template_not_found: TemplateNotFoundError,
  invalid_argument: InvalidArgumentError,
  path_too_long: InvalidArgumentError,
  invalid_state: InvalidStateError,
  operation_in_progress: InvalidStateError,
  sandbox_not_running: InvalidStateError,
  sandbox_destroyed: InvalidStateError,
  code_interpreter_unavailable: InvalidStateError,
  already_exists: ConflictError,
  not_empty: ConflictError,
  volume_in_use: ConflictError,
  disk_full: ConflictError,
  ca_not_configured: ConflictError,
  quota_exceeded: QuotaExceededError,
  limit_exceeded: QuotaExceededError,
  payload_too_large: PayloadTooLargeError,
  exec_timeout: TimeoutError,
  timeout: TimeoutError,
  capacity_exhausted: UnavailableError,
  agent_unavailable: UnavailableError,
  invalid_response: InvalidResponseError,
};

/**
 * Builds the typed error for an error `code` (unknown codes give a plain {@link DenApiError}).
 *
 * @example
 * ```ts
 * const e = apiError("sandbox_not_found", "no such sandbox", 404);
 * e instanceof SandboxNotFoundError; // true
 * ```
 */
export function apiError(code: string, message: string, status: number, details?: Record<string, unknown>): DenApiError {
  const Cls = Object.hasOwn(BY_CODE, code) ? BY_CODE[code]! : DenApiError;
  return new Cls(code, message, status, details);
}

/**
 * Turns an error response's status and raw body text into a typed error. A body that is not
 * `{ error: { code, message } }` (e.g. an HTML page from a proxy) gives a `DenApiError` with
 * the code `http_<status>` and the start of the body as the message.
 *
 * @example
 * ```ts
 * const e = errorFromResponse(401, '{"error":{"code":"unauthorized","message":"bad key"}}');
 * e instanceof UnauthorizedError; // true
 * ```
 */
export function errorFromResponse(status: number, bodyText: string, statusText = ""): DenApiError {
  let parsed: unknown;
  try {
    parsed = JSON.parse(bodyText);
  } catch {
    parsed = undefined;
  }
  const err = isRecord(parsed) ? parsed.error : undefined;
  if (isRecord(err) && typeof err.code === "string" && typeof err.message === "string") {
    return apiError(err.code, err.message, status, isRecord(err.details) ? err.details : undefined);
  }
  const snippet = bodyText.trim().slice(0, 200);
  const msg = `HTTP ${status}${statusText ? ` ${statusText}` : ""}${snippet ? `: ${snippet}` : ""}`;
  return new DenApiError(`http_${status}`, msg, status);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
