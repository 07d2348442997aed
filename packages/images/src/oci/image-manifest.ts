/**
 * Reading what a registry (or an archive) says of an image: index/manifest documents and the
 * image config, validated with zod and checked against limits. Pure: bytes in, typed values or
 * `image_invalid` / `image_not_found` out. `where` in each call names the source for messages.
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { DenError } from "@den/protocol";
import type { Descriptor, RunConfig } from "./types.js";

export const MEDIA_TYPES = {
  ociIndex: "application/vnd.oci.image.index.v1+json",
  ociManifest: "application/vnd.oci.image.manifest.v1+json",
  dockerList: "application/vnd.docker.distribution.manifest.list.v2+json",
  dockerManifest: "application/vnd.docker.distribution.manifest.v2+json",
  ociConfig: "application/vnd.oci.image.config.v1+json",
  dockerConfig: "application/vnd.docker.container.image.v1+json",
} as const;

/** The Accept header of a manifest request: the four current kinds, never schema1. */
export const MANIFEST_ACCEPT = [MEDIA_TYPES.ociIndex, MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerList, MEDIA_TYPES.dockerManifest].join(", ");

const INDEX_TYPES = new Set<string>([MEDIA_TYPES.ociIndex, MEDIA_TYPES.dockerList]);
const MANIFEST_TYPES = new Set<string>([MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerManifest]);
const CONFIG_TYPES = new Set<string>([MEDIA_TYPES.ociConfig, MEDIA_TYPES.dockerConfig]);
const SCHEMA1_TYPES = new Set(["application/vnd.docker.distribution.manifest.v1+json", "application/vnd.docker.distribution.manifest.v1+prettyjws"]);
/** Layers Den can unpack: tars, plain or gzip/zstd compressed. Foreign and non-distributable layers are not among them. */
export const LAYER_TYPES: ReadonlySet<string> = new Set([
  "application/vnd.oci.image.layer.v1.tar",
  "application/vnd.oci.image.layer.v1.tar+gzip",
  "application/vnd.oci.image.layer.v1.tar+zstd",
  "application/vnd.docker.image.rootfs.diff.tar.gzip",
]);

export interface ImageLimits {
  /** Largest manifest or index document. */
  maxManifestBytes: number;
  /** Largest config blob. */
  maxConfigBytes: number;
  maxLayers: number;
  /** Largest sum of the (compressed) layer sizes. */
  maxImageBytes: number;
}

export const DEFAULT_IMAGE_LIMITS: ImageLimits = {
  maxManifestBytes: 4 * 1024 * 1024,
  maxConfigBytes: 8 * 1024 * 1024,
  maxLayers: 128,
  maxImageBytes: 10 * 1024 * 1024 * 1024,
};

/** A positive whole number from the environment, else the default (a bad value is refused, not ignored). */
function envCount(env: NodeJS.ProcessEnv, name: string, dflt: number): number {
  const raw = env[name]?.trim();
  if (!raw) return dflt;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < 1) throw new DenError("invalid_argument", `${name}=${JSON.stringify(raw.slice(0, 40))} is not a positive whole number`);
  return n;
}

/** The image limits a deployment sets: DEN_IMAGE_MAX_MB (compressed layers), DEN_IMAGE_MAX_LAYERS. */
export function imageLimits(env: NodeJS.ProcessEnv = process.env): ImageLimits {
  return {
    ...DEFAULT_IMAGE_LIMITS,
    maxLayers: envCount(env, "DEN_IMAGE_MAX_LAYERS", DEFAULT_IMAGE_LIMITS.maxLayers),
    maxImageBytes: envCount(env, "DEN_IMAGE_MAX_MB", DEFAULT_IMAGE_LIMITS.maxImageBytes / 1024 ** 2) * 1024 ** 2,
  };
}

/** How big an image may be once unpacked: DEN_IMAGE_MAX_UNPACKED_MB (default 16384). */
export function maxUnpackedBytes(env: NodeJS.ProcessEnv = process.env): number {
  return envCount(env, "DEN_IMAGE_MAX_UNPACKED_MB", 16384) * 1024 ** 2;
}

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

/** This host's platform in OCI terms: linux/amd64 or linux/arm64. */
export function hostPlatform(arch: string = process.arch): Platform {
  if (arch === "x64") return { os: "linux", architecture: "amd64" };
  if (arch === "arm64") return { os: "linux", architecture: "arm64" };
  throw new DenError("invalid_argument", `no OCI platform for this host's architecture ${arch}`);
}

export function formatPlatform(p: Platform): string {
  return `${p.os}/${p.architecture}${p.variant ? `/${p.variant}` : ""}`;
}

export function sha256Digest(bytes: Uint8Array): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

const Digest = z.string().regex(/^sha256:[a-f0-9]{64}$/, "must be sha256:<64 lowercase hex>");
const Size = z.number().int().nonnegative();
const DescriptorSchema = z.object({ mediaType: z.string().min(1).max(256), digest: Digest, size: Size });
const PlatformSchema = z.object({ os: z.string().max(64), architecture: z.string().max(64), variant: z.string().max(64).optional() });
const IndexSchema = z.object({
  schemaVersion: z.literal(2),
  manifests: z.array(DescriptorSchema.extend({ platform: PlatformSchema.optional() })).max(4096),
});
const ManifestSchema = z.object({
  schemaVersion: z.literal(2),
  config: DescriptorSchema,
  layers: z.array(DescriptorSchema).max(100_000),
});
const NoNul = z.string().max(64 * 1024).refine((s) => !s.includes("\0"), "contains a NUL byte");
const Argv = z.array(NoNul).max(4096);
const ConfigSchema = z.object({
  architecture: z.string().min(1).max(64),
  os: z.string().min(1).max(64),
  variant: z.string().max(64).optional(),
  config: z
    .object({
      Env: z.array(NoNul.regex(/^[^=]+=/, "is not NAME=value")).max(4096).nullish(),
      Entrypoint: Argv.nullish(),
      Cmd: Argv.nullish(),
      WorkingDir: NoNul.max(4096).nullish(),
      User: NoNul.max(256).nullish(),
    })
    .nullish(),
  rootfs: z.object({ type: z.literal("layers"), diff_ids: z.array(Digest).max(100_000) }),
});

export type IndexEntry = Descriptor & { platform?: Platform };
export type ManifestDocument = { kind: "index"; manifests: IndexEntry[] } | { kind: "manifest"; config: Descriptor; layers: Descriptor[] };

function invalid(message: string): DenError {
  return new DenError("image_invalid", message);
}

function zodProblem(error: z.ZodError): string {
  return error.issues
    .slice(0, 3)
    .map((i) => `${i.path.join(".") || "(top)"}: ${i.message}`)
    .join("; ");
}

function parseJson(bytes: Uint8Array, where: string): unknown {
  try {
    return JSON.parse(Buffer.from(bytes).toString("utf8"));
  } catch {
    throw invalid(`${where} is not JSON`);
  }
}

/**
 * Reads a manifest or an index. Its kind comes from its own `mediaType`, else the response's
 * Content-Type, else its shape. Schema1 and anything that is not a container image are refused.
 */
export function parseManifestDocument(bytes: Uint8Array, contentType: string | undefined, where: string): ManifestDocument {
  const json = parseJson(bytes, where);
  if (!json || typeof json !== "object" || Array.isArray(json)) throw invalid(`${where} is not a JSON object`);
  const doc = json as Record<string, unknown>;
  const declared = typeof doc.mediaType === "string" ? doc.mediaType : undefined;
  const header = contentType?.split(";")[0]?.trim().toLowerCase();
  const headerType = header && header !== "application/json" && header !== "text/plain" && header !== "application/octet-stream" ? header : undefined;
  const type = declared ?? headerType ?? (Array.isArray(doc.manifests) ? MEDIA_TYPES.ociIndex : MEDIA_TYPES.ociManifest);
  if (doc.schemaVersion === 1 || SCHEMA1_TYPES.has(type)) {
    throw invalid(`${where} is a docker schema1 manifest (deprecated, unsupported): re-push the image with a current docker, buildah or skopeo`);
  }
  if (INDEX_TYPES.has(type)) {
    const parsed = IndexSchema.safeParse(doc);
    if (!parsed.success) throw invalid(`${where} is a malformed image index: ${zodProblem(parsed.error)}`);
    return { kind: "index", manifests: parsed.data.manifests };
  }
  if (MANIFEST_TYPES.has(type)) {
    const parsed = ManifestSchema.safeParse(doc);
    if (!parsed.success) throw invalid(`${where} is a malformed image manifest: ${zodProblem(parsed.error)}`);
    return { kind: "manifest", config: parsed.data.config, layers: parsed.data.layers };
  }
  throw invalid(`${where} has media type ${JSON.stringify(type.slice(0, 120))}, which is not a container image manifest or index`);
}

function variantFits(architecture: string, variant: string | undefined): boolean {
  if (!variant) return true;
  if (architecture === "arm64") return variant === "v8";
  if (architecture === "amd64") return variant === "v1";
  return false;
}

/** The index entry for `platform` (os and architecture equal; arm64's v8 variant accepted), else `image_not_found` listing what there is. */
export function pickPlatform(manifests: IndexEntry[], platform: Platform, where: string): IndexEntry {
  const fits = manifests.find(
    (m) => MANIFEST_TYPES.has(m.mediaType) && m.platform?.os === platform.os && m.platform.architecture === platform.architecture && variantFits(platform.architecture, m.platform.variant),
  );
  if (fits) return fits;
  const offered = [...new Set(manifests.flatMap((m) => (m.platform ? [formatPlatform(m.platform)] : [])))].slice(0, 12);
  throw new DenError("image_not_found", `${where} has no ${formatPlatform(platform)} image (it has: ${offered.join(", ") || "none with a platform"})`);
}

/** Refuses a manifest Den cannot or will not pull: a non-image config, a layer that is not a tar, too many layers, too many bytes. */
export function checkImageManifest(m: { config: Descriptor; layers: Descriptor[] }, limits: ImageLimits, where: string): void {
  if (!CONFIG_TYPES.has(m.config.mediaType)) throw invalid(`${where}: config media type ${JSON.stringify(m.config.mediaType)} is not a container image config`);
  if (m.config.size > limits.maxConfigBytes) throw invalid(`${where}: config is ${m.config.size} bytes, over the ${limits.maxConfigBytes}-byte limit`);
  if (m.layers.length > limits.maxLayers) throw invalid(`${where} has ${m.layers.length} layers, over the limit of ${limits.maxLayers}`);
  let total = 0;
  for (const layer of m.layers) {
    if (!LAYER_TYPES.has(layer.mediaType)) throw invalid(`${where}: layer ${layer.digest} has media type ${JSON.stringify(layer.mediaType.slice(0, 120))}, not a (gzip/zstd) tar Den can unpack`);
    total += layer.size;
  }
  if (total > limits.maxImageBytes) throw invalid(`${where}: its layers total ${total} bytes, over the ${limits.maxImageBytes}-byte limit`);
}

export interface ImageConfig {
  run: RunConfig;
  diffIds: string[];
  platform: Platform;
}

/** Reads an image config blob: how to run it, its layers' uncompressed digests, its platform. */
export function parseImageConfig(bytes: Uint8Array, where: string): ImageConfig {
  const parsed = ConfigSchema.safeParse(parseJson(bytes, where));
  if (!parsed.success) throw invalid(`${where} is a malformed image config: ${zodProblem(parsed.error)}`);
  const c = parsed.data;
  const cfg = c.config ?? {};
  return {
    run: {
      env: cfg.Env ?? [],
      entrypoint: cfg.Entrypoint ?? null,
      cmd: cfg.Cmd ?? null,
      workingDir: cfg.WorkingDir ?? "",
      user: cfg.User ?? "",
    },
    diffIds: c.rootfs.diff_ids,
    platform: { os: c.os, architecture: c.architecture, ...(c.variant ? { variant: c.variant } : {}) },
  };
}
