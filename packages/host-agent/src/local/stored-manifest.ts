/** A stored snapshot's runtime manifest, checked before this host uses any of it. */
import { DenError } from "@den/protocol";
import { checkManifest, type SnapshotManifest } from "@den/runtime";
import type { StoredSnapshot } from "@den/store";

/**
 * The runtime's manifest carried in `stored` (whose own fields readStoredManifest checked),
 * every field of it checked, and each file it lists one the store has, of the size it says.
 * `what`: what errors call it.
 */
export function runtimeManifestOf(stored: StoredSnapshot, what: string): SnapshotManifest {
  const m = checkManifest(stored.snapshot, what);
  for (const [name, f] of Object.entries(m.files)) {
    const obj = stored.files[name];
    if (!obj || obj.rawSize !== f.size) throw new DenError("snapshot_corrupt", `${what}: its file ${name} is ${obj ? `${obj.rawSize} bytes in the store, ${f.size} in its manifest` : "not in the store"}`);
  }
  return m;
}
