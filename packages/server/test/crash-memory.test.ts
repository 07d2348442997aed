// needs: memory host, SQLite
/**
 * The crash test (crash.test.ts) on the in-memory host: `den serve` killed with SIGKILL in
 * random rounds and at every fault point of every operation, restarted, and checked for
 * lost sandboxes, half states, stray VMs and stored objects, in about a second a round (12
 * rounds by default, twice what the real run had). The VM pass runs the same file with
 * fewer rounds on real microVMs, the Postgres pass as a fleet.
 */
process.env.DEN_CRASH_HOST = "memory";
process.env.DEN_CRASH_ROUNDS ??= "12";
await import("./crash.test.js");
