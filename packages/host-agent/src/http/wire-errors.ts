import { DenError, errorFromWire, host } from "@den/protocol";

/** A DenError as the host protocol sends it: all of it (details too: the other side is Den). */
export function errorBody(e: DenError): { error: { code: string; message: string; details?: Record<string, unknown> } } {
  return { error: e.toJSON() };
}

/** Anything thrown, as the DenError that goes on the wire (a bug is `internal`, its message kept in the host's log). */
export function asDenError(e: unknown): DenError {
  return e instanceof DenError ? e : new DenError("internal", "internal error in the host agent");
}

/** An error response of the host back into the DenError it was thrown as. */
export function errorFromResponse(status: number, text: string, what: string): DenError {
  try {
    const b = host.ErrorBody.parse(JSON.parse(text));
    return errorFromWire(b.error.code, b.error.message, b.error.details);
  } catch {
    return new DenError(status === 401 ? "unauthorized" : "agent_protocol_error", `${what}: the host agent answered HTTP ${status}: ${text.slice(0, 200)}`);
  }
}
