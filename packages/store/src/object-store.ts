import type { FileHandle } from "node:fs/promises";
import type { Readable } from "node:stream";
import { DenError } from "@den/protocol";

export interface ObjectInfo {
  key: string;
  size: number;
  /** When it was written (epoch ms), for grace periods; 0 when the store does not say. */
  modifiedAt: number;
}

export interface TransferProgress {
  key: string;
  bytes: number;
  total?: number;
}

/**
 * Where snapshots go when a sandbox leaves its host (cold hibernate, checkpoints): a
 * flat key space of immutable objects. Two implementations: a local directory (default)
 * and S3-compatible object storage.
 */
export interface ObjectStore {
  readonly kind: "local" | "s3";
  putBytes(key: string, data: Buffer): Promise<void>;
  /** Uploads a stream under `key`, replacing it (an object made as it is uploaded: compressed and hashed on the way, no temp copy; multipart where it applies). */
  putStream(key: string, stream: Readable, onProgress?: (p: TransferProgress) => void): Promise<void>;
  getBytes(key: string): Promise<Buffer>;
  /** An object's bytes as a stream (a download that is decompressed and hashed as it comes, with no temp file). */
  getStream(key: string, onProgress?: (p: TransferProgress) => void): Promise<Readable>;
  head(key: string): Promise<ObjectInfo | undefined>;
  list(prefix: string): Promise<ObjectInfo[]>;
  delete(key: string): Promise<void>;
  /**
   * Removes what writes that will never finish left under `prefix` and no listing shows
   * (a local temp file of a killed writer). Absent where the store keeps no such thing
   * in sight: S3 leaves incomplete multipart uploads to the bucket's lifecycle rule.
   */
  sweepAbandoned?(prefix: string): Promise<number>;
  /**
   * A store of local files only: an object made by a writer straight into a descriptor (a
   * native tool's output, so its bytes never pass through Den), read back once to hash it.
   * Absent where the bytes must be sent anyway (S3).
   */
  putFromFd?(key: string, write: (fd: number) => Promise<void>, onProgress?: (p: TransferProgress) => void): Promise<{ size: number; sha256: string }>;
  /** A store of local files only: the object's file, open for reading (a tool reads it straight). */
  openFile?(key: string): Promise<FileHandle>;
}

const KEY = /^[a-z0-9][a-z0-9._-]*(\/[a-z0-9][a-z0-9._-]*)*$/i;

/** Keys are relative, slash-separated names: no `..`, no absolute paths, no NUL, bounded. */
export function checkKey(key: string): void {
  if (typeof key !== "string" || key.length > 512 || !KEY.test(key) || key.split("/").some((p) => p === "." || p === "..")) {
    throw new DenError("invalid_argument", `invalid store key ${JSON.stringify(key)}`);
  }
}

export function checkPrefix(prefix: string): void {
  if (prefix === "") return;
  checkKey(prefix.replace(/\/$/, ""));
}
