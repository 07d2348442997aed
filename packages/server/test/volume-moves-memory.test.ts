// needs: memory host, SQLite
/**
 * volume-moves.test's fault points on the in-memory host: a volume's park and its way back,
 * `den serve` killed with SIGKILL at each step, every byte and exactly one copy after the
 * restart. The same file on real microVMs runs what needs a real guest.
 */
process.env.DEN_VOLUME_MOVES_HOST = "memory";
await import("./volume-moves.test.js");
