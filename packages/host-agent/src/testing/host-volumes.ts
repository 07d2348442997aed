/**
 * The in-memory host's volume verbs: images made, deleted, grown (in a helper VM that has
 * it in a slot), parked in the store and fetched from it, listed, and dropped when the
 * image is the one the control plane saw and no VM holds it. The images themselves are
 * memory-volumes.ts's.
 */
import { DenError, type host } from "@den/protocol";
import { manifestBytes, storedDigests } from "@den/store";
import type { Faults } from "./faults.js";
import type { Lifecycle } from "./host-lifecycle.js";
import type { HostState } from "./host-state.js";
import { getStored, putStored } from "./memory-image.js";
import type { SerialVolume } from "./memory-volumes.js";

/** Where a helper VM mounts the volume it grows. */
const HELPER_MOUNT = "/mnt/den-volume";

export class VolumeOps {
  constructor(private readonly state: HostState, private readonly lifecycle: Lifecycle, private readonly faults: Faults) {}

  create(id: string, sizeMb: number): void {
    this.state.change(() => this.state.vols.create(id, sizeMb));
  }

  delete(id: string): void {
    this.state.change(() => this.state.vols.remove(id));
  }

  /** Grown in a helper VM of its own that mounts it read-write, gone after. */
  grow(id: string, sizeMb: number, helper: string): void {
    this.lifecycle.create({ id: helper, template: "base", volumes: [{ volume: id, path: HELPER_MOUNT, readOnly: false }] });
    try {
      this.state.change(() => this.state.vols.grow(id, sizeMb));
    } finally {
      this.lifecycle.destroy(helper);
    }
  }

  /** (A copy already at `to` is replaced, as the real host does: the digests are of what this host put.) */
  async park(id: string, to: host.StoredRef): Promise<{ storedBytes: number; digests: host.StoredDigests }> {
    const { store, vols } = this.state;
    vols.get(id);
    // A VM that has it in a slot may be writing it: the copy would be torn.
    const user = this.state.volumeUser(id);
    if (user) throw new DenError("volume_in_use", `volume ${id} is in a slot of VM ${user.id} on this host`);
    const stored = await putStored(store, to.key, vols.serialize(id), { volume: id }, { tmp: this.state.tmp, midway: () => this.faults.at("snapshot-upload-mid") });
    return { storedBytes: manifestBytes(stored), digests: storedDigests(stored) };
  }

  /** The stored copy becomes this host's image (whole, in place of any other: a new inode), checked against the digests its park recorded. */
  async fetch(id: string, from: host.StoredRef): Promise<void> {
    this.state.vols.check(id);
    const got = (await getStored(this.state.store, from.key, { tmp: this.state.tmp, digests: from.digests })) as SerialVolume;
    this.state.change(() => this.state.vols.restore(id, got));
  }

  images(): host.VolumeImage[] {
    return this.state.vols.list();
  }

  drop(id: string, inode: number): boolean {
    const { vols } = this.state;
    vols.check(id);
    if (this.state.volumeUser(id)) return false;
    if (vols.list().find((v) => v.id === id)?.inode !== inode) return false;
    this.state.change(() => vols.remove(id));
    return true;
  }
}
