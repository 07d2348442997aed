import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statfsSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { Admission, diskOvercommit, diskPromisedMb } from "../src/admission.js";

const freeMb = (dir: string) => {
  const st = statfsSync(dir);
  return Math.floor((st.bavail * st.bsize) / 1024 / 1024);
};

test("every guest disk may fill to its size: what existing disks may still write is promised above the reserve", () => {
  const dir = mkdtempSync(join(tmpdir(), "den-admission-"));
  try {
    // One sandbox whose 4 GiB disk already holds 8 MiB, one not made yet, one destroyed.
    const a = join(dir, "a");
    mkdirSync(a);
    writeFileSync(join(a, "disk.qcow2"), Buffer.alloc(8 * 1024 * 1024, 1));
    const sandboxes = [
      { dir: a, state: "running", info: { diskMb: 4096 } },
      { dir: join(dir, "b"), state: "stopped", info: { diskMb: 1024 } },
      { dir: join(dir, "c"), state: "destroyed", info: { diskMb: 100_000 } },
    ];
    const promised = diskPromisedMb(sandboxes);
    assert.ok(promised > 4096 - 9 + 1024 - 1 && promised <= 4096 - 8 + 1024, `promised ${promised} MiB`);

    // Room for exactly 10 GiB of promises above the reserve.
    const reserve = freeMb(dir) - promised - 10 * 1024;
    const adm = new Admission({ memoryMb: 1 << 20, vcpus: 1024, diskReserveMb: reserve }, dir, () => new Map(), () => diskPromisedMb(sandboxes));
    adm.check({ vcpus: 1, memoryMb: 512, diskMb: 4096 }, 2);
    const release = adm.reserve("sbx_1", { vcpus: 1, memoryMb: 512, diskMb: 8192 });
    assert.throws(() => adm.check({ vcpus: 1, memoryMb: 512, diskMb: 4096 }), (e: unknown) =>
      e instanceof DenError && e.code === "capacity_exhausted" && e.details?.resource === "disk" && /promised/.test(e.message));
    release();
    adm.check({ vcpus: 1, memoryMb: 512, diskMb: 4096 });
    // Overcommitted twice over, the same fits twice.
    const over = new Admission({ memoryMb: 1 << 20, vcpus: 1024, diskReserveMb: reserve }, dir, () => new Map(), () => diskPromisedMb(sandboxes), 2);
    over.check({ vcpus: 1, memoryMb: 512, diskMb: 16 * 1024 });
    assert.equal(diskOvercommit({ DEN_DISK_OVERCOMMIT: "2.5" }), 2.5);
    assert.equal(diskOvercommit({}), 4, "by default a quarter of what the disks may still grow by is kept free");
    assert.equal(diskOvercommit({ DEN_DISK_OVERCOMMIT: "0.5" }), 1, "never less than the disk there is");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
