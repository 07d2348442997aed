/** The shapes the image pipeline's parts share: a pulled (or imported) image, before it is unpacked. */

/** An OCI content descriptor: what a manifest says of one blob. */
export interface Descriptor {
  mediaType: string;
  /** `sha256:<64 hex>` (the only algorithm accepted). */
  digest: string;
  /** Its size in bytes, as the manifest states it; the blob must be exactly this long. */
  size: number;
}

/** What an image's config says about how to run it (OCI image config, its `config` field). */
export interface RunConfig {
  /** `NAME=value` entries, in order. */
  env: string[];
  entrypoint: string[] | null;
  cmd: string[] | null;
  /** "" when the image sets none. */
  workingDir: string;
  /** "" when the image sets none; else `name`, `uid`, `name:group` or `uid:gid`. */
  user: string;
}

/** An image whose manifest and config are read and checked; its layers are blobs in a BlobCache (or still to fetch). */
export interface ResolvedImage {
  /** Where it came from, for logs (never with credentials): `registry/repository@sha256:...`, or `archive`. */
  source: string;
  /** Digest of the platform manifest picked (not of an index). */
  manifestDigest: string;
  /** The config blob's descriptor. */
  config: Descriptor;
  /** Layers, bottom first, as the manifest lists them (compressed blobs). */
  layers: Descriptor[];
  /** The config's `rootfs.diff_ids`: each layer's digest once uncompressed, same order. */
  diffIds: string[];
  run: RunConfig;
  /** `os/architecture[/variant]` of the image. */
  platform: string;
}
