/**
 * Pulls images by the OCI distribution protocol: resolves a reference to a checked manifest and
 * config (picking this host's platform from an index), and streams blobs into a BlobCache.
 * One pull is one session: its tokens are fetched once per (endpoint, repository) and a mirror
 * that failed is not tried again. Credentials go only to the registry itself (not to mirrors,
 * not across a redirect) and never into an error or a log line.
 */
import { readFileSync } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { rootCertificates } from "node:tls";
import { DenError } from "@den/protocol";
import type { BlobCache } from "./blob-cache.js";
import {
  DEFAULT_IMAGE_LIMITS,
  MANIFEST_ACCEPT,
  checkImageManifest,
  formatPlatform,
  hostPlatform,
  imageLimits,
  parseImageConfig,
  parseManifestDocument,
  pickPlatform,
  sha256Digest,
  type ImageLimits,
  type Platform,
} from "./image-manifest.js";
import { bearerAuthorization, basicAuthorization, fetchBearerToken, hasLogin, pickChallenge, type RegistryAuth } from "./registry-auth.js";
import { abortedError, httpGet, isAborted, networkError, pullFailed, readBody, type HttpReply, type HttpSettings } from "./registry-http.js";
import { defaultRegistry, formatRef, insecureRegistries, isDigest, parseImageRef, registryEndpoint, registryMirrors, type ImageRef } from "./reference.js";
import type { Descriptor, ResolvedImage } from "./types.js";

export interface RegistryClientOptions {
  /** `host:port` that may be reached over plain http (DEN_INSECURE_REGISTRIES). */
  insecureRegistries?: string[];
  /** A PEM file of extra CAs trusted for TLS, besides Node's (DEN_REGISTRY_CA_FILE). */
  caFile?: string;
  /** registry -> mirror hosts tried before it (DEN_REGISTRY_MIRRORS). */
  mirrors?: Map<string, string[]>;
  /** Registry of unqualified names when a string reference is given (DEN_DEFAULT_REGISTRY; docker.io). */
  defaultRegistry?: string;
  /** Response headers must come within this (default 30 s). */
  requestTimeoutMs?: number;
  /** A body that sends nothing for this long is abandoned (default 30 s). */
  stallTimeoutMs?: number;
  limits?: Partial<ImageLimits>;
}

export interface ResolveOptions {
  auth?: RegistryAuth;
  signal?: AbortSignal;
  /** Default: this host's (linux/amd64 or linux/arm64). */
  platform?: Platform;
}

export interface FetchOptions {
  auth?: RegistryAuth;
  signal?: AbortSignal;
  /** Human log lines: `pulling sha256:abcd… (12.3 MB)`, `layer sha256:abcd… cached`. */
  onProgress?: (line: string) => void;
}

export type PullOptions = ResolveOptions & FetchOptions;

const MAX_REDIRECTS = 5;
const MAX_CA_FILE_BYTES = 1024 * 1024;
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** A host serving one registry's API: a mirror or the registry itself. */
interface Endpoint {
  host: string;
  base: URL;
  mirror: boolean;
  /** Names it in errors: "registry ghcr.io", "mirror m.local:5000 (of docker.io)". */
  label: string;
}

/** One pull's state: its reference, the endpoints left to try, the auth headers obtained so far. */
interface Session {
  ref: ImageRef;
  endpoints: Endpoint[];
  auth?: RegistryAuth;
  signal?: AbortSignal;
  /** endpoint host -> Authorization value; only ever holds headers for this session's repository. */
  authorization: Map<string, string>;
}

/** What a GET is for: what to Accept, and how a 404 reads. */
interface Want {
  accept?: string;
  notFound: (endpoint: Endpoint) => DenError;
}

export class RegistryClient {
  private readonly http: HttpSettings;
  private readonly mirrors: Map<string, string[]>;
  private readonly limits: ImageLimits;
  readonly defaultRegistry: string;

  constructor(opts: RegistryClientOptions = {}) {
    this.http = {
      insecure: new Set((opts.insecureRegistries ?? []).map(urlHost)),
      ...(opts.caFile ? { ca: [...rootCertificates, readCaFile(opts.caFile)] } : {}),
      requestTimeoutMs: positive(opts.requestTimeoutMs, 30_000, "requestTimeoutMs"),
      stallTimeoutMs: positive(opts.stallTimeoutMs, 30_000, "stallTimeoutMs"),
    };
    this.mirrors = opts.mirrors ?? new Map();
    this.limits = { ...DEFAULT_IMAGE_LIMITS, ...opts.limits };
    this.defaultRegistry = opts.defaultRegistry ?? "docker.io";
  }

  /** A client configured by DEN_INSECURE_REGISTRIES, DEN_REGISTRY_CA_FILE, DEN_REGISTRY_MIRRORS and DEN_DEFAULT_REGISTRY. */
  static fromEnv(env: NodeJS.ProcessEnv = process.env): RegistryClient {
    const caFile = env.DEN_REGISTRY_CA_FILE?.trim();
    return new RegistryClient({
      insecureRegistries: insecureRegistries(env.DEN_INSECURE_REGISTRIES),
      ...(caFile ? { caFile } : {}),
      mirrors: registryMirrors(env.DEN_REGISTRY_MIRRORS),
      defaultRegistry: defaultRegistry(env),
      limits: imageLimits(env),
    });
  }

  /** Parses a reference with this client's default registry. */
  parse(ref: string | ImageRef): ImageRef {
    return typeof ref === "string" ? parseImageRef(ref, { defaultRegistry: this.defaultRegistry }) : ref;
  }

  /** Reads and checks an image's manifest (this host's platform, from an index) and config; fetches no layer. */
  async resolve(ref: string | ImageRef, opts: ResolveOptions = {}): Promise<ResolvedImage> {
    return (await this.resolveIn(this.session(ref, opts), opts.platform ?? hostPlatform())).image;
  }

  /** Brings one blob into the cache (a no-op if it is there) and returns its path. */
  async fetchBlob(ref: string | ImageRef, desc: Descriptor, cache: BlobCache, opts: FetchOptions = {}): Promise<string> {
    if (!isDigest(desc.digest) || !Number.isSafeInteger(desc.size) || desc.size < 0) throw new DenError("invalid_argument", "fetchBlob needs a descriptor with a sha256 digest and a size");
    return this.fetchIn(this.session(ref, opts), desc, cache, "blob", opts.onProgress);
  }

  /** Resolves an image and brings its config and every layer into the cache, one at a time. */
  async pull(ref: string | ImageRef, cache: BlobCache, opts: PullOptions = {}): Promise<ResolvedImage> {
    const session = this.session(ref, opts);
    const { image, configBytes } = await this.resolveIn(session, opts.platform ?? hostPlatform(), cache);
    const release = cache.hold([image.config.digest, ...image.layers.map((l) => l.digest)]);
    try {
      if (cache.has(image.config.digest)) await cache.touch(image.config.digest);
      else await cache.put(image.config, (async function* () { yield configBytes; })(), opts.signal);
      for (const layer of image.layers) await this.fetchIn(session, layer, cache, "layer", opts.onProgress);
    } finally {
      release();
    }
    const total = image.layers.reduce((sum, l) => sum + l.size, 0);
    opts.onProgress?.(`pulled ${image.source} (${image.layers.length} layers, ${humanBytes(total)})`);
    return image;
  }

  private session(ref: string | ImageRef, opts: { auth?: RegistryAuth; signal?: AbortSignal }): Session {
    const parsed = this.parse(ref);
    const own = registryEndpoint(parsed.registry);
    const endpoints: Endpoint[] = [
      ...(this.mirrors.get(parsed.registry) ?? []).map((host) => this.endpoint(host, true, `mirror ${host} (of ${parsed.registry})`)),
      this.endpoint(own, false, own === parsed.registry ? `registry ${own}` : `registry ${parsed.registry} (${own})`),
    ];
    const authorization = new Map<string, string>();
    if (opts.auth && "token" in opts.auth) authorization.set(own, bearerAuthorization(opts.auth.token));
    if (hasLogin(opts.auth)) basicAuthorization(opts.auth); // a malformed login fails here, before any request
    return { ref: parsed, endpoints, ...(opts.auth ? { auth: opts.auth } : {}), ...(opts.signal ? { signal: opts.signal } : {}), authorization };
  }

  private endpoint(host: string, mirror: boolean, label: string): Endpoint {
    const scheme = this.http.insecure.has(urlHost(host)) ? "http" : "https";
    return { host, base: new URL(`${scheme}://${host}`), mirror, label };
  }

  /** With a cache, a config it already holds is read from there rather than fetched. */
  private async resolveIn(session: Session, platform: Platform, cache?: BlobCache): Promise<{ image: ResolvedImage; configBytes: Buffer }> {
    const ref = session.ref;
    const name = formatRef(ref);
    const top = await this.fetchManifest(session, ref.digest ?? ref.tag ?? "latest", ref.digest, undefined);
    let manifestDigest = top.digest;
    let doc = parseManifestDocument(top.bytes, top.contentType, `manifest of ${name}`);
    if (doc.kind === "index") {
      const entry = pickPlatform(doc.manifests, platform, `image index of ${name}`);
      if (entry.size > this.limits.maxManifestBytes) throw new DenError("image_invalid", `manifest ${entry.digest} of ${name} is ${entry.size} bytes, over the limit`);
      const child = await this.fetchManifest(session, entry.digest, entry.digest, entry.size);
      manifestDigest = child.digest;
      doc = parseManifestDocument(child.bytes, child.contentType, `manifest ${entry.digest} of ${name}`);
      if (doc.kind !== "manifest") throw new DenError("image_invalid", `${name}: an index inside an index is not supported`);
    }
    const where = `image ${ref.registry}/${ref.repository}@${manifestDigest}`;
    checkImageManifest(doc, this.limits, where);
    const configBytes = (cache && (await readCachedConfig(cache, doc.config))) || (await this.fetchConfig(session, doc.config));
    const config = parseImageConfig(configBytes, `config of ${where}`);
    if (config.diffIds.length !== doc.layers.length) {
      throw new DenError("image_invalid", `${where}: its config lists ${config.diffIds.length} diff_ids for ${doc.layers.length} layers`);
    }
    if (config.platform.os !== platform.os || config.platform.architecture !== platform.architecture) {
      throw new DenError("image_not_found", `${name} is a ${formatPlatform(config.platform)} image; this host needs ${formatPlatform(platform)}`);
    }
    const image: ResolvedImage = {
      source: `${ref.registry}/${ref.repository}@${manifestDigest}`,
      manifestDigest,
      config: doc.config,
      layers: doc.layers,
      diffIds: config.diffIds,
      run: config.run,
      platform: formatPlatform(config.platform),
    };
    return { image, configBytes };
  }

  /** GETs a manifest by tag or digest, bounded; checks it against `digest`/`size` when given. */
  private async fetchManifest(session: Session, reference: string, digest: string | undefined, size: number | undefined) {
    const { repository } = session.ref;
    const want: Want = {
      accept: MANIFEST_ACCEPT,
      notFound: (ep) => new DenError("image_not_found", `${ep.label} has no image ${session.ref.registry}/${repository}${isDigest(reference) ? "@" : ":"}${reference}`),
    };
    return this.acrossEndpoints(session, async (ep) => {
      const reply = await this.open(session, ep, `/v2/${repository}/manifests/${reference}`, want);
      const max = this.limits.maxManifestBytes;
      const bytes = await readBody(reply, max, () => new DenError("image_invalid", `manifest of ${formatRef(session.ref)} from ${ep.label} is over ${max} bytes`));
      const actual = sha256Digest(bytes);
      if (digest && actual !== digest) throw new DenError("image_invalid", `manifest from ${ep.label} does not match its digest ${digest}`);
      if (size !== undefined && bytes.length !== size) throw new DenError("image_invalid", `manifest ${digest} from ${ep.label} is ${bytes.length} bytes, its index states ${size}`);
      const contentType = reply.headers["content-type"];
      return { bytes, digest: actual, contentType };
    });
  }

  /** GETs the config blob into memory (it is small and bounded), checking size and digest. */
  private async fetchConfig(session: Session, desc: Descriptor): Promise<Buffer> {
    return this.acrossEndpoints(session, async (ep) => {
      const reply = await this.open(session, ep, `/v2/${session.ref.repository}/blobs/${desc.digest}`, this.blobWant(session, desc));
      const bytes = await readBody(reply, desc.size, () => new DenError("image_invalid", `config ${desc.digest} is longer than the ${desc.size} bytes its manifest states`));
      if (bytes.length !== desc.size) throw new DenError("image_invalid", `config ${desc.digest} is ${bytes.length} bytes, its manifest states ${desc.size}`);
      if (sha256Digest(bytes) !== desc.digest) throw new DenError("image_invalid", `config ${desc.digest} does not match its digest`);
      return bytes;
    });
  }

  private async fetchIn(session: Session, desc: Descriptor, cache: BlobCache, noun: string, onProgress?: (line: string) => void): Promise<string> {
    if (cache.has(desc.digest)) {
      await cache.touch(desc.digest);
      onProgress?.(`${noun} ${shortDigest(desc.digest)} cached`);
      return cache.path(desc.digest);
    }
    onProgress?.(`pulling ${shortDigest(desc.digest)} (${humanBytes(desc.size)})`);
    return this.acrossEndpoints(session, async (ep) => {
      const reply = await this.open(session, ep, `/v2/${session.ref.repository}/blobs/${desc.digest}`, this.blobWant(session, desc));
      try {
        const declared = Number(reply.headers["content-length"]);
        if (Number.isFinite(declared) && declared > desc.size) {
          throw new DenError("image_invalid", `blob ${desc.digest} from ${ep.label} is ${declared} bytes, its manifest states ${desc.size}`);
        }
        return await cache.put(desc, reply.body, session.signal);
      } finally {
        reply.close();
      }
    });
  }

  private blobWant(session: Session, desc: Descriptor): Want {
    return { notFound: (ep) => pullFailed(`${ep.label} has no blob ${desc.digest} of ${session.ref.repository}, though its manifest lists it`) };
  }

  /**
   * Runs `attempt` against each endpoint in turn: a mirror's failure (of any kind but an
   * abort) falls through to the next, and that mirror is skipped for the rest of the session;
   * the registry's own failure is the answer.
   */
  private async acrossEndpoints<T>(session: Session, attempt: (ep: Endpoint) => Promise<T>): Promise<T> {
    for (const ep of [...session.endpoints]) {
      try {
        return await attempt(ep);
      } catch (e) {
        if (!ep.mirror || isAborted(e)) throw e;
        session.endpoints = session.endpoints.filter((x) => x !== ep);
      }
    }
    throw new DenError("internal", "no registry endpoint left to try");
  }

  /**
   * GETs `path` from an endpoint and returns a 200 reply: answers a 401 challenge once (Basic,
   * or a bearer token from its realm), follows up to 5 redirects (the Authorization header
   * stays with the endpoint's origin), and maps the other statuses to Den errors.
   */
  private async open(session: Session, ep: Endpoint, path: string, want: Want): Promise<HttpReply> {
    if (session.signal?.aborted) throw abortedError();
    let url = new URL(path, ep.base);
    let answeredChallenge = false;
    // A token given by the caller is final: a 401 with it is a refusal, not a challenge to answer.
    const givenToken = !ep.mirror && !!session.auth && "token" in session.auth;
    for (let redirects = 0; ; ) {
      const sameOrigin = url.origin === ep.base.origin;
      const label = sameOrigin ? ep.label : `${ep.label} (redirected to ${url.host})`;
      const headers: Record<string, string> = want.accept ? { accept: want.accept } : {};
      const authorization = session.authorization.get(ep.host);
      if (authorization && sameOrigin) headers.authorization = authorization;
      const reply = await httpGet(url, headers, label, this.http, session.signal);
      const status = reply.status;
      if (status === 200) return reply;
      const location = reply.headers.location;
      const challenge = reply.headers["www-authenticate"];
      reply.close();
      if (REDIRECTS.has(status)) {
        if (!location) throw pullFailed(`${label} redirected (HTTP ${status}) without a Location`);
        if (++redirects > MAX_REDIRECTS) throw pullFailed(`${ep.label} redirected more than ${MAX_REDIRECTS} times`);
        try {
          url = new URL(location, url);
        } catch {
          throw pullFailed(`${label} redirected to a malformed Location`);
        }
        continue;
      }
      const login = !ep.mirror && hasLogin(session.auth);
      if (status === 401 && sameOrigin) {
        if (answeredChallenge || givenToken) {
          // Docker Hub answers an anonymous token's request for a missing repository this way too.
          throw pullFailed(login || givenToken ? `${ep.label} refused the credentials` : `${ep.label} needs credentials for ${session.ref.repository} (or it does not exist)`);
        }
        session.authorization.set(ep.host, await this.answerChallenge(session, ep, challenge));
        answeredChallenge = true;
        continue;
      }
      if (status === 401 || status === 403) {
        if (!sameOrigin) throw pullFailed(`${label} refused the download (HTTP ${status})`);
        throw pullFailed(login || givenToken ? `${ep.label} refused the credentials for ${session.ref.repository} (HTTP 403)` : `${ep.label} denied access to ${session.ref.repository} (HTTP 403)`);
      }
      if (status === 404) throw sameOrigin ? want.notFound(ep) : pullFailed(`${label} answered HTTP 404`);
      if (status === 429) throw pullFailed(`${label} is rate-limiting pulls (HTTP 429); try later, or use credentials or a mirror`);
      throw pullFailed(`${label} answered HTTP ${status}`);
    }
  }

  /** The Authorization value that answers a 401's challenge. Mirrors get no credentials. */
  private async answerChallenge(session: Session, ep: Endpoint, header: string | undefined): Promise<string> {
    const challenge = pickChallenge(header);
    const auth = ep.mirror ? undefined : session.auth;
    if (!challenge) throw pullFailed(`${ep.label} needs credentials (it asked for no scheme Den speaks)`);
    if (challenge.scheme === "basic") {
      if (!hasLogin(auth)) throw pullFailed(`${ep.label} needs credentials for ${session.ref.repository}`);
      return basicAuthorization(auth);
    }
    const scope = `repository:${session.ref.repository}:pull`;
    try {
      return bearerAuthorization(await fetchBearerToken(challenge, scope, auth, ep.label, this.http, session.signal));
    } catch (e) {
      throw networkError(e, ep.label);
    }
  }
}

/** A config blob from the cache, if there and intact (it was checked on put; a byte changed since is a miss, not an error). */
async function readCachedConfig(cache: BlobCache, desc: Descriptor): Promise<Buffer | undefined> {
  const size = await stat(cache.path(desc.digest)).then((st) => st.size, () => -1);
  if (size !== desc.size) return undefined;
  const bytes = await readFile(cache.path(desc.digest)).catch(() => undefined);
  return bytes && bytes.length === desc.size && sha256Digest(bytes) === desc.digest ? bytes : undefined;
}

/** `sha256:abcdef012345…` for log lines. */
export function shortDigest(digest: string): string {
  return `${digest.slice(0, "sha256:".length + 12)}…`;
}

/** `12.3 MB`, `840 kB`, `512 B` (decimal units, as registries and docker print them). */
export function humanBytes(n: number): string {
  if (n < 1000) return `${n} B`;
  const units = ["kB", "MB", "GB", "TB"];
  let v = n / 1000;
  let i = 0;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i++;
  }
  return `${v >= 100 ? Math.round(v) : Math.round(v * 10) / 10} ${units[i]}`;
}

/** A `host[:port]` as URL.host writes it (a default port dropped), to compare with request URLs. */
function urlHost(host: string): string {
  try {
    return new URL(`http://${host}`).host;
  } catch {
    throw new DenError("invalid_argument", `not a registry host[:port]: ${JSON.stringify(host.slice(0, 80))}`);
  }
}

function positive(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) throw new DenError("invalid_argument", `RegistryClient ${name} must be a positive number of ms`);
  return value;
}

function readCaFile(path: string): string {
  let pem: string;
  try {
    const bytes = readFileSync(path);
    if (bytes.length > MAX_CA_FILE_BYTES) throw new Error("too big");
    pem = bytes.toString("utf8");
  } catch {
    throw new DenError("invalid_argument", `registry CA file ${path} cannot be read (or is over 1 MiB)`);
  }
  if (!pem.includes("-----BEGIN CERTIFICATE-----")) throw new DenError("invalid_argument", `registry CA file ${path} holds no PEM certificate`);
  return pem;
}
