/**
 * The code port: where Den's code server (E2B's code interpreter's port) listens in a
 * sandbox, and how a request to it carries the sandbox's env vars, which the server applies
 * to the code it runs (E2B's server reads them from envd's `GET /envs`; Den's gets them with
 * each request instead).
 */

/** The guest port of the code server (E2B's code interpreter's, `@e2b/code-interpreter`). */
export const CODE_PORT = 49999;

/** The request header that carries the sandbox's env vars to the code server. */
export const SANDBOX_ENV_HEADER = "X-Den-Sandbox-Env";

/** The value of `X-Den-Sandbox-Env`: base64 of the env vars as one JSON object (`{"NAME": "value"}`). */
export function sandboxEnvHeader(env: Record<string, string>): string {
  return Buffer.from(JSON.stringify(env), "utf8").toString("base64");
}

/** The env vars a `X-Den-Sandbox-Env` value carries (the inverse of sandboxEnvHeader); undefined if it is malformed. */
export function parseSandboxEnvHeader(value: string): Record<string, string> | undefined {
  try {
    const v = JSON.parse(Buffer.from(value, "base64").toString("utf8")) as unknown;
    if (!v || typeof v !== "object" || Array.isArray(v)) return undefined;
    const out: Record<string, string> = {};
    for (const [k, s] of Object.entries(v)) if (typeof s === "string") out[k] = s;
    return out;
  } catch {
    return undefined;
  }
}
