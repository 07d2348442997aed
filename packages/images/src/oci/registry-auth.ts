/**
 * Registry authentication: reading a 401's `WWW-Authenticate` challenge, and answering it with
 * Basic credentials or a bearer token from the challenge's realm (the docker token protocol).
 * No credential, token or header built from them is ever put in an error or a log line.
 */
import { z } from "zod";
import { DenError } from "@den/protocol";
import { httpGet, pullFailed, readBody, type HttpSettings } from "./registry-http.js";

/** What a caller may give to pull a private image: a login, or a ready bearer token. */
export type RegistryAuth = { username: string; password: string } | { token: string };

export interface Challenge {
  /** Lowercased: `bearer`, `basic`, ... */
  scheme: string;
  /** Parameter names lowercased: `realm`, `service`, `scope`. */
  params: Record<string, string>;
}

const MAX_TOKEN_RESPONSE = 64 * 1024;
/** What may go in a header value: visible ASCII. */
const HEADER_SAFE = /^[\x21-\x7e]+$/;

const TokenResponse = z.object({
  token: z.string().optional(),
  access_token: z.string().optional(),
});

/**
 * Parses a `WWW-Authenticate` value into its challenges (several may be joined by commas):
 * `Bearer realm="https://auth.example/token",service="x",scope="repository:a/b:pull"`.
 */
export function parseChallenges(header: string | undefined): Challenge[] {
  const out: Challenge[] = [];
  if (!header) return out;
  const s = header.slice(0, 16 * 1024);
  let i = 0;
  let current: Challenge | undefined;
  const skip = (re: RegExp) => {
    while (i < s.length && re.test(s[i]!)) i++;
  };
  while (i < s.length) {
    skip(/[\s,]/);
    const start = i;
    while (i < s.length && !/[\s=,]/.test(s[i]!)) i++;
    const word = s.slice(start, i);
    if (!word) break;
    skip(/\s/);
    if (s[i] !== "=") {
      current = { scheme: word.toLowerCase(), params: {} };
      out.push(current);
      continue;
    }
    i++;
    skip(/\s/);
    let value = "";
    if (s[i] === '"') {
      for (i++; i < s.length && s[i] !== '"'; i++) value += s[i] === "\\" && i + 1 < s.length ? s[++i] : s[i];
      i++;
    } else {
      const vstart = i;
      while (i < s.length && !/[\s,]/.test(s[i]!)) i++;
      value = s.slice(vstart, i);
    }
    if (current) current.params[word.toLowerCase()] = value;
  }
  return out;
}

/** The challenge to answer: bearer if offered, else basic. */
export function pickChallenge(header: string | undefined): Challenge | undefined {
  const all = parseChallenges(header);
  return all.find((c) => c.scheme === "bearer") ?? all.find((c) => c.scheme === "basic");
}

export function basicAuthorization(auth: { username: string; password: string }): string {
  if (auth.username.includes(":")) throw new DenError("invalid_argument", "a registry username cannot contain ':'");
  return `Basic ${Buffer.from(`${auth.username}:${auth.password}`, "utf8").toString("base64")}`;
}

export function bearerAuthorization(token: string): string {
  if (!HEADER_SAFE.test(token) || token.length > 16 * 1024) throw new DenError("invalid_argument", "a registry token must be up to 16 KiB of visible ASCII");
  return `Bearer ${token}`;
}

export function hasLogin(auth: RegistryAuth | undefined): auth is { username: string; password: string } {
  return !!auth && "username" in auth;
}

/**
 * Gets a bearer token from the challenge's realm for `scope` (the challenge's own, else
 * `defaultScope`), sending the login as Basic if there is one. `label` names the registry.
 */
export async function fetchBearerToken(
  challenge: Challenge,
  defaultScope: string,
  auth: RegistryAuth | undefined,
  label: string,
  http: HttpSettings,
  signal?: AbortSignal,
): Promise<string> {
  let realm: URL;
  try {
    realm = new URL(challenge.params.realm ?? "");
  } catch {
    throw pullFailed(`${label} asked for a bearer token without a valid realm URL`);
  }
  if (realm.username || realm.password) throw pullFailed(`${label} gave a token realm with credentials in it; refusing it`);
  if (challenge.params.service) realm.searchParams.set("service", challenge.params.service);
  realm.searchParams.set("scope", challenge.params.scope || defaultScope);
  const tokenLabel = `${label}'s token service (${realm.host})`;
  const headers: Record<string, string> = { accept: "application/json" };
  if (hasLogin(auth)) headers.authorization = basicAuthorization(auth);
  const reply = await httpGet(realm, headers, tokenLabel, http, signal);
  if (reply.status === 401 || reply.status === 403) {
    reply.close();
    throw pullFailed(hasLogin(auth) ? `${label} refused the credentials` : `${label} needs credentials`);
  }
  if (reply.status !== 200) {
    reply.close();
    throw pullFailed(`${tokenLabel} answered HTTP ${reply.status}`);
  }
  const body = await readBody(reply, MAX_TOKEN_RESPONSE, () => pullFailed(`${tokenLabel} sent an answer over ${MAX_TOKEN_RESPONSE / 1024} KiB`));
  let json: unknown;
  try {
    json = JSON.parse(body.toString("utf8"));
  } catch {
    throw pullFailed(`${tokenLabel} did not answer JSON`);
  }
  const parsed = TokenResponse.safeParse(json);
  const token = parsed.success ? parsed.data.token || parsed.data.access_token : undefined;
  if (!token) throw pullFailed(`${tokenLabel} answered no token`);
  if (!HEADER_SAFE.test(token) || token.length > 16 * 1024) throw pullFailed(`${tokenLabel} answered a malformed token`);
  return token;
}
