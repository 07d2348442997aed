import { join } from "node:path";
import { AgentClient } from "./agent-client.js";
import { runToCompletion } from "./exec.js";
import { VM_FILES } from "./qemu.js";
import type { Vm } from "./vm.js";

/** Where every Den template has its guest agent (the initramfs starts it from there). */
const GUEST_AGENT_PATH = "/usr/local/sbin/den-agent";

/** How long a pooled VM's warm-up may take before the VM is given up (a broken template). */
const WARMUP_TIMEOUT_MS = 30_000;

/**
 * Runs a pooled QEMU's guest once before any create takes it: the template's state is
 * loaded, the guest answers its agent and runs one command, and the VM is paused again
 * with no connection left. A new QEMU process starts with nothing translated (TCG) and
 * with none of the template's pages mapped in: a create's first calls paid for both, about
 * as much as the restore itself. The guest has only run idle and its agent's own code; a
 * create still gives it its clock, fresh entropy and its limits (Sandbox.connectAgent).
 */
export async function warmPooledVm(vm: Vm, dir: string, stateFile: string): Promise<void> {
  await vm.loadState(stateFile);
  const agent = await AgentClient.connect(join(dir, VM_FILES.agent), WARMUP_TIMEOUT_MS, () => vm.cont());
  try {
    // Den's own agent binary, which every template has (an image's may have no `true`): its usage line, exit 2.
    await runToCompletion(agent, [GUEST_AGENT_PATH, "--help"], { timeoutMs: WARMUP_TIMEOUT_MS });
  } finally {
    agent.close();
  }
  await vm.stop();
}
