import { DenError, type ProcInfo, type ProcReadReply, type ProcWaitReply } from "@den/protocol";
import type { AgentClient } from "./agent-client.js";

/** A guest's background processes (started by `Sandbox.spawn`), each call over its agent. */
export function guestProcesses(agent: () => Promise<AgentClient>) {
  return {
    list: async (): Promise<ProcInfo[]> => (await (await agent()).request("proc.list", {})).procs,
    read: async (proc: number, channel: "stdout" | "stderr", offset = 0, max = 256 * 1024): Promise<ProcReadReply> =>
      (await agent()).request("proc.read", { proc, channel: channel === "stdout" ? 1 : 2, offset, max }),
    wait: async (proc: number, timeoutMs = 0): Promise<ProcWaitReply> => {
      if (!(timeoutMs >= 0)) throw new DenError("invalid_argument", "timeout must be >= 0");
      return (await agent()).request("proc.wait", { proc, timeout_ms: timeoutMs });
    },
    write: async (proc: number, data: Buffer | string, eof = false): Promise<void> => {
      await (await agent()).request("proc.stdin", { proc, data: Buffer.from(data).toString("base64"), eof });
    },
    signal: async (proc: number, signal: number): Promise<void> => {
      await (await agent()).request("proc.signal", { proc, signal });
    },
    kill: async (proc: number): Promise<void> => {
      await (await agent()).request("proc.kill", { proc });
    },
  };
}
