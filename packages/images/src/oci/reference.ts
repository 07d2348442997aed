/**
 * Image references (`python:3.12`, `ghcr.io/o/r@sha256:...`) parsed and normalized as docker
 * does, and the registry settings read from the environment (default registry, mirrors,
 * plain-http registries). Pure functions: nothing here touches the network.
 */
import { DenError } from "@den/protocol";

/** A parsed reference: where the image lives and which one. */
export interface ImageRef {
  /** `docker.io`, `ghcr.io`, `127.0.0.1:5000` (lowercase; docker.io's aliases folded into it). */
  registry: string;
  /** `library/python`, `org/app` (the OCI distribution grammar: lowercase components). */
  repository: string;
  /** Kept for logs even when a digest pins the image; `latest` when neither is given. */
  tag?: string;
  /** `sha256:<64 hex>`: when present it, not the tag, picks the manifest. */
  digest?: string;
}

export const DOCKER_HUB = "docker.io";
/** Where docker.io's registry API actually answers. */
const DOCKER_HUB_ENDPOINT = "registry-1.docker.io";
const DOCKER_HUB_ALIASES = new Set(["docker.io", "index.docker.io", "registry-1.docker.io"]);

const MAX_REF_LENGTH = 512;
/** docker's own cap on `registry/repository`. */
const MAX_NAME_LENGTH = 255;

// The OCI distribution spec's grammar for repository names.
const PATH_COMPONENT = "[a-z0-9]+(?:(?:\\.|_|__|-+)[a-z0-9]+)*";
const REPOSITORY = new RegExp(`^${PATH_COMPONENT}(?:/${PATH_COMPONENT})*$`);
const TAG = /^\w[\w.-]{0,127}$/;
const DIGEST = /^sha256:[a-f0-9]{64}$/;
// A DNS name or a bracketed IPv6 address, with an optional port.
const HOST_LABEL = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const HOST = new RegExp(`^(?:${HOST_LABEL}(?:\\.${HOST_LABEL})*|\\[[0-9a-fA-F:.]+\\])(?::([0-9]{1,5}))?$`);

function bad(ref: string, why: string): DenError {
  return new DenError("invalid_argument", `invalid image reference ${JSON.stringify(ref.slice(0, 80))}: ${why}`);
}

/** True for `sha256:<64 lowercase hex>`, the only digest form accepted anywhere in the image code. */
export function isDigest(s: unknown): s is string {
  return typeof s === "string" && DIGEST.test(s);
}

/** Checks a `host[:port]` (no scheme, no path) and returns it lowercased, docker.io's aliases folded; undefined if malformed. */
export function normalizeRegistryHost(host: string): string | undefined {
  if (host.length > 253 + 6) return undefined;
  const m = HOST.exec(host);
  if (!m) return undefined;
  if (m[1] !== undefined) {
    const port = Number(m[1]);
    if (port < 1 || port > 65535) return undefined;
  }
  const lower = host.toLowerCase();
  return DOCKER_HUB_ALIASES.has(lower) ? DOCKER_HUB : lower;
}

/**
 * Parses an image reference with docker's normalization: a first path component holding `.` or
 * `:` (or `localhost`) is the registry, else it is `defaultRegistry` (docker.io unless told);
 * a one-component name gets docker's `library/` prefix; no tag and no digest means `latest`.
 * Throws `invalid_argument` with the reason for anything outside the grammar.
 */
export function parseImageRef(ref: string, opts: { defaultRegistry?: string } = {}): ImageRef {
  if (typeof ref !== "string" || ref.length === 0) throw bad(String(ref), "empty");
  if (ref.length > MAX_REF_LENGTH) throw bad(ref, `longer than ${MAX_REF_LENGTH} characters`);
  if (ref.includes("://")) throw bad(ref, "write it without a scheme (host/repository:tag)");

  let name = ref;
  let digest: string | undefined;
  const at = name.indexOf("@");
  if (at >= 0) {
    digest = name.slice(at + 1);
    name = name.slice(0, at);
    if (!DIGEST.test(digest)) throw bad(ref, "the digest must be sha256:<64 lowercase hex digits>");
  }

  let tag: string | undefined;
  const colon = name.lastIndexOf(":");
  if (colon > name.lastIndexOf("/")) {
    tag = name.slice(colon + 1);
    name = name.slice(0, colon);
    if (!TAG.test(tag)) throw bad(ref, "a tag is 1-128 of [A-Za-z0-9_.-], not starting with . or -");
  }

  let registry: string;
  let repository: string;
  const slash = name.indexOf("/");
  const first = slash >= 0 ? name.slice(0, slash) : "";
  if (slash >= 0 && (first.includes(".") || first.includes(":") || first === "localhost")) {
    const host = normalizeRegistryHost(first);
    if (!host) throw bad(ref, `${JSON.stringify(first)} is not a valid registry host[:port]`);
    registry = host;
    repository = name.slice(slash + 1);
  } else {
    const fallback = opts.defaultRegistry ?? DOCKER_HUB;
    const host = normalizeRegistryHost(fallback);
    if (!host) throw new DenError("invalid_argument", `invalid default registry ${JSON.stringify(fallback.slice(0, 80))}`);
    registry = host;
    repository = name;
    // Docker Hub's official images live under library/; a default registry stands in for Hub
    // (a mirror or a pull-through cache keeps the same names).
    if (!repository.includes("/")) repository = `library/${repository}`;
  }
  if (registry === DOCKER_HUB && !repository.includes("/")) repository = `library/${repository}`;

  if (repository.length === 0) throw bad(ref, "no repository name");
  if (!REPOSITORY.test(repository)) {
    const why = repository !== repository.toLowerCase() ? "repository names must be lowercase" : "a repository is lowercase [a-z0-9] components joined by . _ __ - and separated by /";
    throw bad(ref, why);
  }
  if (registry.length + 1 + repository.length > MAX_NAME_LENGTH) throw bad(ref, `registry/repository is longer than ${MAX_NAME_LENGTH} characters`);
  if (!tag && !digest) tag = "latest";
  return { registry, repository, ...(tag ? { tag } : {}), ...(digest ? { digest } : {}) };
}

/** `registry/repository[:tag][@digest]`: the normalized form, for logs and `source`. */
export function formatRef(ref: ImageRef): string {
  return `${ref.registry}/${ref.repository}${ref.tag ? `:${ref.tag}` : ""}${ref.digest ? `@${ref.digest}` : ""}`;
}

/** The host whose `/v2/` API serves a registry: docker.io is `registry-1.docker.io`. */
export function registryEndpoint(registry: string): string {
  return registry === DOCKER_HUB ? DOCKER_HUB_ENDPOINT : registry;
}

/** The registry an unqualified name (`python:3.12`) comes from: `DEN_DEFAULT_REGISTRY`, else docker.io. */
export function defaultRegistry(env: NodeJS.ProcessEnv = process.env): string {
  const value = env.DEN_DEFAULT_REGISTRY?.trim();
  if (!value) return DOCKER_HUB;
  const host = normalizeRegistryHost(value);
  if (!host) throw new DenError("invalid_argument", `DEN_DEFAULT_REGISTRY=${JSON.stringify(value.slice(0, 80))} is not a registry host[:port]`);
  return host;
}

/**
 * Parses `DEN_REGISTRY_MIRRORS`: comma-separated `registry=mirrorhost[:port]` pairs; a registry
 * may appear more than once (its mirrors are tried in the order given, then the registry itself).
 */
export function registryMirrors(value: string | undefined): Map<string, string[]> {
  const mirrors = new Map<string, string[]>();
  for (const entry of (value ?? "").split(",")) {
    const pair = entry.trim();
    if (!pair) continue;
    const eq = pair.indexOf("=");
    const registry = eq > 0 ? normalizeRegistryHost(pair.slice(0, eq).trim()) : undefined;
    const mirror = eq > 0 ? normalizeMirrorHost(pair.slice(eq + 1).trim()) : undefined;
    if (!registry || !mirror) {
      throw new DenError("invalid_argument", `DEN_REGISTRY_MIRRORS: ${JSON.stringify(pair.slice(0, 120))} is not registry=mirrorhost[:port]`);
    }
    mirrors.set(registry, [...(mirrors.get(registry) ?? []), mirror]);
  }
  return mirrors;
}

/** Parses `DEN_INSECURE_REGISTRIES`: comma-separated `host[:port]` that may be reached over plain http. */
export function insecureRegistries(value: string | undefined): string[] {
  const hosts: string[] = [];
  for (const entry of (value ?? "").split(",")) {
    const host = entry.trim();
    if (!host) continue;
    const normal = normalizeMirrorHost(host);
    if (!normal) throw new DenError("invalid_argument", `DEN_INSECURE_REGISTRIES: ${JSON.stringify(host.slice(0, 120))} is not a host[:port]`);
    hosts.push(normal);
  }
  return hosts;
}

/** A host as contacted (no folding of docker.io's aliases: a mirror is a host, not a registry name). */
function normalizeMirrorHost(host: string): string | undefined {
  return normalizeRegistryHost(host) === undefined ? undefined : host.toLowerCase();
}
