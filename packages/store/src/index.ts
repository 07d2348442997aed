export * from "./object-store.js";
export { LocalDirStore } from "./local-store.js";
export { S3Store, type S3StoreOptions } from "./s3-store.js";
export * from "./snapshots.js";
export { MAX_MANIFEST_BYTES, STORE_MANIFEST, checkStoredManifest, manifestBytes, readStoredDigests, readStoredManifest, storedDigests, type StoredObject, type StoredSnapshot } from "./stored-manifest.js";
export { faultPoint } from "./faults.js";
export { codecCpuSeconds, preferredCompression, type Compression } from "./codec.js";
