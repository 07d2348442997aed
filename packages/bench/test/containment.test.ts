// needs: many VMs
/**
 * Containment (real microVMs, a `den serve` of its own): while a hostile sandbox runs a
 * fork bomb, a memory hog at its limit, a disk fill to its quota, a CPU loop on every
 * vCPU, a console flood and 1 MiB frames on its agent channel, a neighbour's execs keep
 * succeeding, neither VM is paused, the host keeps its memory and disk reserves, Den's
 * memory stays flat and its API answers. It prints the benchmark's table for its short
 * windows; `npm run bench:containment` runs longer ones and writes every byte of the fill.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { QUICK_WORKLOADS, containmentTable, runContainment } from "../src/containment.js";

test("a hostile sandbox's runaway workloads stay inside it", { timeout: 900_000 }, async () => {
  const dataDir = process.env.DEN_DATA_DIR;
  assert.ok(dataDir, "DEN_DATA_DIR is set (npm test)");
  const samples = await runContainment({ port: 19262, dataDir, windowMs: 3_000 }, QUICK_WORKLOADS);
  const table = containmentTable(samples);
  console.log(table.join("\n"));
  for (const s of samples) {
    assert.ok(s.execMs.length >= 3, `${s.workload}: the neighbour ran execs throughout (${s.execMs.length})\n${table.join("\n")}`);
    assert.deepEqual(s.failures, [], `${s.workload} broke containment\n${table.join("\n")}`);
    // Den buffers nothing a guest sends: 1 MiB frames on the channel are dropped as they come.
    assert.ok(s.rssGrowthMb < 128, `${s.workload}: Den's RSS grew by ${s.rssGrowthMb.toFixed(0)} MiB`);
  }
  assert.equal(samples.length, 7, "idle and six workloads");
});
