// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statfsSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { Admission, diskOvercommit, diskPromisedMb, memoryCharge, memoryOvercommit, memoryReserveMb } from "../src/admission.js";
import { PrivateMemoryCache, availableMemoryMb, privateMemoryMb } from "../src/host-memory.js";

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

test("a warm-hibernated (paused) VM holds its memory but no vCPU", () => {
  const dir = mkdtempSync(join(tmpdir(), "den-admission-"));
  try {
    const live = new Map([["a", { vcpus: 2, memoryMb: 512, paused: true }], ["b", { vcpus: 2, memoryMb: 512 }]]);
    const adm = new Admission({ memoryMb: 2048, vcpus: 4, diskReserveMb: 0 }, dir, () => live);
    assert.deepEqual(adm.used(), { vcpus: 2, memoryMb: 1024, sandboxes: 2 });
    adm.check({ vcpus: 2, memoryMb: 1024 });
    assert.throws(() => adm.check({ vcpus: 2, memoryMb: 1536 }), (e: unknown) => e instanceof DenError && e.details?.resource === "memory");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("with a memory overcommit, a VM is charged what it holds privately plus a share of the rest; the host's available memory still has the last word", () => {
  assert.equal(memoryCharge(512, 64, 1), 512, "no overcommit: the guest's RAM");
  assert.equal(memoryCharge(512, 64, 4), 64 + 112);
  assert.equal(memoryCharge(512, 900, 4), 512, "never more than its guest RAM");
  assert.equal(memoryCharge(512, undefined, 4), 512, "not measured: all of it");
  assert.equal(memoryOvercommit({}), 1);
  assert.equal(memoryOvercommit({ DEN_MEMORY_OVERCOMMIT: "3" }), 3);
  assert.equal(memoryOvercommit({ DEN_MEMORY_OVERCOMMIT: "0.2" }), 1);
  assert.equal(memoryReserveMb({ DEN_MEMORY_RESERVE_MB: "4096" }), 4096);
  assert.ok(memoryReserveMb({}) >= 1024);
  const dir = mkdtempSync(join(tmpdir(), "den-admission-"));
  try {
    // Ten idle 512 MiB sandboxes holding 64 MiB each: 1760 MiB charged at 4x, 5120 MiB without.
    const live = new Map(Array.from({ length: 10 }, (_, i) => [`s${i}`, { vcpus: 1, memoryMb: 512, privateMb: 64 }]));
    let available = 8192;
    const adm = new Admission({ memoryMb: 2048, vcpus: 64, diskReserveMb: 0 }, dir, () => live, () => 0, 1, 4, { availableMb: () => available, reserveMb: 1024 });
    assert.equal(adm.used().memoryMb, 1760);
    adm.check({ vcpus: 1, memoryMb: 512 }, 2); // 2 x 128 more
    assert.throws(() => adm.check({ vcpus: 1, memoryMb: 512 }, 3), (e: unknown) => e instanceof DenError && e.details?.resource === "memory");
    assert.throws(() => new Admission({ memoryMb: 2048, vcpus: 64, diskReserveMb: 0 }, dir, () => live).check({ vcpus: 1, memoryMb: 512 }),
      (e: unknown) => e instanceof DenError && e.details?.resource === "memory", "without the overcommit they fill it");
    available = 900;
    assert.throws(() => adm.check({ vcpus: 1, memoryMb: 512 }), (e: unknown) => e instanceof DenError && e.code === "capacity_exhausted" && e.details?.resource === "memory_pressure" && /short of memory/.test(e.message));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a process's private memory is read from the kernel, at most once per interval, again in the background", async () => {
  let now = 0;
  const cache = new PrivateMemoryCache(1000, () => now);
  const first = cache.get(process.pid);
  assert.ok(first !== undefined && first > 1, `this process holds ${first} MiB privately`);
  const hog = Buffer.alloc(64 << 20, 1);
  assert.equal(cache.get(process.pid), first, "cached within the interval");
  now = 1500;
  // Past it: the last reading now, a new one read off the event loop for the next call.
  assert.equal(cache.get(process.pid), first, "the last reading while a new one is read");
  await cache.settled();
  const again = cache.get(process.pid)!;
  assert.ok(again > first + 40, `read again after it (64 MiB more written): ${first} then ${again} MiB`);
  assert.equal(privateMemoryMb(0x7ffffff0), undefined, "a process that is gone holds nothing");
  assert.ok(availableMemoryMb() > 0);
  hog.fill(0);
});
