import type { Readable } from "node:stream";
import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import { DenError } from "@den/protocol";
import { withProgress } from "./progress.js";
import { checkKey, checkPrefix, type ObjectInfo, type ObjectStore, type TransferProgress } from "./object-store.js";

export interface S3StoreOptions {
  bucket: string;
  /** Key prefix inside the bucket (e.g. "den/"). */
  prefix?: string;
  endpoint?: string;
  region?: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  /** Path-style URLs (MinIO, s3rver, most self-hosted servers). */
  forcePathStyle?: boolean;
}

// The pinned SDK works on Node 20; its notice that later releases will need Node 22 is for
// whoever upgrades the pin, not for every server start.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";

/** Parts of a multipart upload: large snapshots upload in parallel pieces. */
const PART_BYTES = 16 * 1024 * 1024;

function isNotFound(e: unknown): boolean {
  const err = e as { name?: string; $metadata?: { httpStatusCode?: number } };
  return err.name === "NotFound" || err.name === "NoSuchKey" || err.$metadata?.httpStatusCode === 404;
}

/** Objects in an S3-compatible bucket. */
export class S3Store implements ObjectStore {
  readonly kind = "s3" as const;
  private readonly client: S3Client;
  private readonly prefix: string;

  constructor(private readonly opts: S3StoreOptions) {
    this.prefix = opts.prefix ?? "";
    this.client = new S3Client({
      region: opts.region ?? "us-east-1",
      ...(opts.endpoint ? { endpoint: opts.endpoint } : {}),
      forcePathStyle: opts.forcePathStyle ?? true,
      ...(opts.accessKeyId && opts.secretAccessKey ? { credentials: { accessKeyId: opts.accessKeyId, secretAccessKey: opts.secretAccessKey } } : {}),
      // Streamed uploads with checksums use aws-chunked framing that some S3-compatible servers store verbatim.
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
    });
  }

  private k(key: string): string {
    checkKey(key);
    return this.prefix + key;
  }

  async putStream(key: string, stream: Readable, onProgress?: (p: TransferProgress) => void): Promise<void> {
    // Parts of PART_BYTES, two in flight: what it buffers is bounded whatever the object's size.
    const upload = new Upload({ client: this.client, params: { Bucket: this.opts.bucket, Key: this.k(key), Body: stream }, partSize: PART_BYTES, queueSize: 2 });
    let bytes = 0;
    upload.on("httpUploadProgress", (p) => onProgress?.({ key, bytes: (bytes = p.loaded ?? bytes) }));
    await upload.done();
    // Its size is known only now: the last report says it is done.
    onProgress?.({ key, bytes, total: bytes });
  }

  async putBytes(key: string, data: Buffer): Promise<void> {
    await this.client.send(new PutObjectCommand({ Bucket: this.opts.bucket, Key: this.k(key), Body: data, ContentLength: data.length }));
  }

  private async body(key: string): Promise<{ stream: Readable; size?: number }> {
    try {
      const r = await this.client.send(new GetObjectCommand({ Bucket: this.opts.bucket, Key: this.k(key) }));
      return { stream: r.Body as Readable, ...(r.ContentLength !== undefined ? { size: r.ContentLength } : {}) };
    } catch (e) {
      if (isNotFound(e)) throw new DenError("snapshot_not_found", `no object ${key} in the store`);
      throw e;
    }
  }

  async getStream(key: string, onProgress?: (p: TransferProgress) => void): Promise<Readable> {
    const { stream, size } = await this.body(key);
    return withProgress(stream, key, size, onProgress);
  }

  async getBytes(key: string): Promise<Buffer> {
    const { stream } = await this.body(key);
    const parts: Buffer[] = [];
    for await (const c of stream) parts.push(c as Buffer);
    return Buffer.concat(parts);
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    try {
      const r = await this.client.send(new HeadObjectCommand({ Bucket: this.opts.bucket, Key: this.k(key) }));
      return { key, size: r.ContentLength ?? 0, modifiedAt: r.LastModified?.getTime() ?? 0 };
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  async list(prefix: string): Promise<ObjectInfo[]> {
    checkPrefix(prefix);
    const out: ObjectInfo[] = [];
    let token: string | undefined;
    do {
      const r = await this.client.send(new ListObjectsV2Command({ Bucket: this.opts.bucket, Prefix: this.prefix + prefix, ...(token ? { ContinuationToken: token } : {}) }));
      for (const o of r.Contents ?? []) if (o.Key) out.push({ key: o.Key.slice(this.prefix.length), size: o.Size ?? 0, modifiedAt: o.LastModified?.getTime() ?? 0 });
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token);
    return out.sort((a, b) => a.key.localeCompare(b.key));
  }

  async delete(key: string): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.opts.bucket, Key: this.k(key) }));
  }

  close(): void {
    this.client.destroy();
  }
}
