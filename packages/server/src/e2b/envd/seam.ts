import { createHash, timingSafeEqual } from "node:crypto";
import type { GuestExit, HostGuest } from "@den/protocol";

/** What a request presented: any of these may be missing; none at all is a 401. */
export interface EnvdCredentials {
  /** `X-Access-Token`: the envdAccessToken the create/connect call returned. */
  accessToken?: string;
  /** `X-API-KEY`: a Den API key (its owner must own the sandbox). */
  apiKey?: string;
  /** A signed `/files` URL (`signature`, `signature_expiration`): see signatureMatches. */
  signature?: EnvdSignature;
}

/** The parts a `/files` signature was computed over, as the request carries them. */
export interface EnvdSignature {
  /** `v1_` + unpadded base64 of sha256(`path:operation:user:token[:expiration]`). */
  value: string;
  /** Unix seconds, when the URL carries one. */
  expiration?: number;
  /** The `path` query parameter as sent ("" when absent). */
  path: string;
  operation: "read" | "write";
  /** The `username` query parameter as sent ("" when absent). */
  user: string;
}

/** What a process Start asks of the command it runs (anything left out: the sandbox's defaults). */
export interface EnvdCommandCall {
  env?: Record<string, string> | undefined;
  /** Absolute (envd resolves a relative one under the user's home first). */
  cwd?: string | undefined;
  user?: string | undefined;
}

/** The long-lived streams an owner holds a bounded number of: a process's output (Start, Connect), a directory watch (WatchDir). */
export type EnvdStreamKind = "process" | "watch";

/** A sandbox an envd request may use. */
export interface EnvdSandbox {
  guest: HostGuest;
  /** The sandbox's own environment (from its create call), as `GET /envs` shows it. */
  env?: Record<string, string>;
  /** Its template's default user (an image's USER): who a request that names none runs as. */
  user?: string;
  /**
   * How a command runs: its whole env (the sandbox's under the call's), its working
   * directory (the call's, else the template's: an image's WORKDIR) and user, as every
   * surface that runs commands sets them up.
   */
  command(call: EnvdCommandCall): { env: Record<string, string>; cwd?: string; user?: string };
  /** A process Start ran `cmd` (argv): the sandbox's events say so (`exec.started`). Never rejects. */
  execStarted(cmd: string[], info: { pid: number }): Promise<void>;
  /** A process this server started exited: the sandbox's events say how (`exec.ended`). Never rejects. */
  execEnded(exit: GuestExit, info: { pid: number }): Promise<void>;
  /**
   * Takes one of the sandbox owner's slots for a long-lived stream while it lasts (the owner's
   * bound, shared with Den's own API's streams); throws (a `limit_exceeded` DenError: Connect's
   * `resource_exhausted`) past it. The returned function gives the slot back (once).
   */
  hold(kind: EnvdStreamKind): () => void;
  /** Counts as activity (idle reaping); cheap to call often. */
  touch(): void;
  /** `cb` runs once when the sandbox stops being usable (killed, expired, paused, lost); returns an unsubscribe. */
  onGone(cb: () => void): () => void;
}

/** Implemented by whoever owns sandboxes (`den serve`): the one seam between envd and the control plane. */
export interface EnvdSandboxes {
  /**
   * The sandbox an envd request is for, after auth. Throws EnvdDenied (401) without a
   * valid credential, EnvdUnavailable (502) when it is unknown, paused (unless it
   * auto-resumes), killed or expired. A sandbox id alone never grants access. `probe`: a
   * health check, which is no traffic (it never wakes a sandbox that auto-resumes).
   */
  open(sandboxId: string, credentials: EnvdCredentials, opts?: { probe?: boolean }): Promise<EnvdSandbox>;
  /**
   * The sandbox whose envd token made `signature`, for a signed `/files` URL that names no
   * sandbox (the client's `downloadUrl`/`uploadUrl` with `E2B_SANDBOX_URL` set carry no id);
   * undefined when none did or it has expired. `open` still checks it. Optional: without it
   * such a URL answers 502, as a request naming no sandbox does.
   */
  bySignature?(signature: EnvdSignature): Promise<string | undefined>;
}

export class EnvdDenied extends Error {
  constructor(message = "missing or invalid credentials (X-Access-Token or X-API-KEY)") {
    super(message);
    this.name = "EnvdDenied";
  }
}

export class EnvdUnavailable extends Error {
  constructor(message = "sandbox is not running") {
    super(message);
    this.name = "EnvdUnavailable";
  }
}

/** Compares secrets in constant time (over their hashes, so lengths leak nothing either). */
export function secretEquals(a: string, b: string): boolean {
  const h = (s: string) => createHash("sha256").update(s).digest();
  return timingSafeEqual(h(a), h(b));
}

/** The signature the `e2b` client computes (its `getSignature`) for these parts and token. */
export function envdSignature(token: string, s: Omit<EnvdSignature, "value">): string {
  const raw = s.expiration === undefined ? `${s.path}:${s.operation}:${s.user}:${token}` : `${s.path}:${s.operation}:${s.user}:${token}:${s.expiration}`;
  return "v1_" + createHash("sha256").update(raw).digest("base64").replace(/=+$/, "");
}

/** A signature's value as its 32 digest bytes; undefined when it is not one the client makes. */
export function signatureDigest(value: string): Buffer | undefined {
  return /^v1_[A-Za-z0-9+/]{43}$/.test(value) ? Buffer.from(value.slice(3), "base64") : undefined;
}

/** Whether `digest` (signatureDigest of the presented value) was made with `token`, in constant time; expiry not checked. */
export function signedWith(token: string, s: Omit<EnvdSignature, "value">, digest: Buffer): boolean {
  const raw = s.expiration === undefined ? `${s.path}:${s.operation}:${s.user}:${token}` : `${s.path}:${s.operation}:${s.user}:${token}:${s.expiration}`;
  return timingSafeEqual(createHash("sha256").update(raw).digest(), digest);
}

/** True when `s` was made with `token` and has not expired (`nowMs`: the clock to judge by). */
export function signatureMatches(token: string, s: EnvdSignature, nowMs = Date.now()): boolean {
  if (s.expiration !== undefined && s.expiration * 1000 < nowMs) return false;
  return secretEquals(envdSignature(token, s), s.value);
}

/**
 * The usual check for an EnvdSandboxes: the access token, or a signature made with it, or
 * an API key that `apiKeyOwns` accepts for this sandbox. Throws EnvdDenied otherwise.
 */
export async function checkCredentials(c: EnvdCredentials, sandboxToken: string | undefined, apiKeyOwns: (key: string) => Promise<boolean>): Promise<void> {
  if (sandboxToken && c.accessToken !== undefined && secretEquals(c.accessToken, sandboxToken)) return;
  if (sandboxToken && c.signature && signatureMatches(sandboxToken, c.signature)) return;
  if (c.apiKey !== undefined && (await apiKeyOwns(c.apiKey))) return;
  throw new EnvdDenied(c.accessToken || c.apiKey || c.signature ? "invalid credentials for this sandbox" : undefined);
}
