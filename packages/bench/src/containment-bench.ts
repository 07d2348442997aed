/**
 * The containment benchmark: a neighbour's exec round trip and the API's p99 while a
 * hostile sandbox runs each workload of containment.ts, beside the same with it idle
 * (goal: within 2x of idle). `--quick`: 5 s windows and a disk fill mostly reserved with
 * fallocate (as the containment test runs it); otherwise 30 s windows and every byte written.
 */
import { QUICK_WORKLOADS, WORKLOADS, containmentTable, runContainment } from "./containment.js";

const quick = process.argv.includes("--quick");
const dataDir = process.env.DEN_DATA_DIR;
if (!dataDir) throw new Error("DEN_DATA_DIR is not set");
const samples = await runContainment({ port: 19261, dataDir, windowMs: quick ? 5_000 : 30_000, log: (s) => console.error(s) }, quick ? QUICK_WORKLOADS : WORKLOADS);
console.log(containmentTable(samples).join("\n"));
const broken = samples.filter((s) => s.failures.length);
for (const s of broken) console.log(`NOT CONTAINED: ${s.workload}: ${s.failures.join("; ")}`);
process.exit(broken.length ? 1 : 0);
