/** The in-memory host agent and its parts, for tests of the control plane without QEMU (README.md). */
export { MemoryHostAgent, type MemoryHostOptions, type MemoryHostState, type MemorySandboxView, type MemoryVmState, type ScriptAnswer } from "./memory-host.js";
export { MemoryGuest, duplexPair, guestById, type GuestImage, type PortHandler, type ScriptReply } from "./memory-guest.js";
export { MemoryFs, STRERROR, type Filesystem } from "./memory-fs.js";
export { runScript, runArgv, knownProgram, type ShellIo } from "./mini-shell.js";
export { ManualClock, systemClock as memorySystemClock, type Clock } from "./clock.js";
export { Faults } from "./faults.js";
