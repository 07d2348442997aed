/**
 * What every envd request carries: which sandbox (the `E2b-Sandbox-Id` header, or a
 * `49983-<id>.<domain>` host), which credential, and which guest user; and the user's
 * view of paths (relative ones are under its home).
 */
import type { IncomingHttpHeaders } from "node:http";
import { posix } from "node:path";
import { ConnectError } from "./connect.js";
import { EnvdUnavailable, type EnvdCredentials, type EnvdSignature } from "./seam.js";

export const DEFAULT_USER = "user";
const USER_RE = /^[a-z_][a-z0-9_-]{0,31}$/;
const SANDBOX_ID_RE = /^[A-Za-z0-9_-]{1,128}$/;
const ENVD_HOST_RE = /^\d{1,5}-([A-Za-z0-9_-]{1,128})\./;

function header(h: IncomingHttpHeaders, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

/** The sandbox a request is for; none is the same as an unknown one (502). */
export function sandboxIdOf(h: IncomingHttpHeaders): string {
  const id = namedSandbox(h);
  if (!id || !SANDBOX_ID_RE.test(id)) throw new EnvdUnavailable("no sandbox named (E2b-Sandbox-Id header)");
  return id;
}

/** The sandbox a request names (`E2b-Sandbox-Id`, or a `49983-<id>.` host), if it names one. */
export function namedSandbox(h: IncomingHttpHeaders): string | undefined {
  return header(h, "e2b-sandbox-id") ?? ENVD_HOST_RE.exec(header(h, "host") ?? "")?.[1];
}

/** The user from `Authorization: Basic base64("<user>:")`, else `fallback`. */
export function userOf(h: IncomingHttpHeaders, fallback: string = DEFAULT_USER): string {
  const auth = header(h, "authorization");
  if (!auth) return fallback;
  const m = /^Basic\s+([A-Za-z0-9+/=]{1,200})$/i.exec(auth.trim());
  if (!m) throw new ConnectError("invalid_argument", "Authorization must be Basic base64(\"<user>:\")");
  return checkUser(Buffer.from(m[1]!, "base64").toString("utf8").split(":")[0] ?? "");
}

export function checkUser(user: string): string {
  if (!USER_RE.test(user)) throw new ConnectError("invalid_argument", `invalid user ${JSON.stringify(user.slice(0, 40))}`);
  return user;
}

/** Header credentials, plus a `/files` signature when the URL has one. */
export function credentialsOf(h: IncomingHttpHeaders, signature?: EnvdSignature): EnvdCredentials {
  const accessToken = header(h, "x-access-token");
  const apiKey = header(h, "x-api-key");
  return { ...(accessToken ? { accessToken } : {}), ...(apiKey ? { apiKey } : {}), ...(signature ? { signature } : {}) };
}

export function homeOf(user: string): string {
  return user === "root" ? "/root" : `/home/${user}`;
}

/** A guest path as the user means it: relative ones under its home. Never touches the host. */
export function resolvePath(user: string, p: string): string {
  if (p.includes("\0")) throw new ConnectError("invalid_argument", "path contains a NUL byte");
  return posix.resolve(homeOf(user), p || ".");
}
