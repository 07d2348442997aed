import { join } from "node:path";
import { LocalDirStore, S3Store, type ObjectStore } from "@den/store";
import type { ServerConfig } from "./config.js";

/**
 * The snapshot store: a local directory by default, S3-compatible storage when configured.
 * A control plane and its host agents must open the same one (hosts write, the control
 * plane's garbage collector deletes).
 */
export function openStore(config: Pick<ServerConfig, "store" | "dataDir">): ObjectStore {
  const s = config.store;
  if (s.kind === "s3") {
    return new S3Store({
      bucket: s.bucket, prefix: s.prefix, forcePathStyle: true,
      ...(s.endpoint ? { endpoint: s.endpoint } : {}), ...(s.region ? { region: s.region } : {}),
      ...(s.accessKeyId && s.secretAccessKey ? { accessKeyId: s.accessKeyId, secretAccessKey: s.secretAccessKey } : {}),
    });
  }
  return new LocalDirStore(s.dir ?? join(config.dataDir, "store"));
}
