import type { Command } from "commander";
import { Sandbox } from "@den/sdk";
import { collect, parsePairs } from "../output.js";

/** Reads all of stdin (for `--stdin`). */
async function readStdin(): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of process.stdin) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

/**
 * `den exec ID -- CMD...`: runs a command, streaming its output live, and exits with its
 * exit code (128+N when killed by signal N, 124 when it timed out).
 */
export function registerExec(program: Command): void {
  program
    .command("exec")
    .description("run a command in a sandbox; streams its output and exits with its exit code")
    .argument("<id>", "sandbox id")
    .argument("<cmd...>", "the command and its arguments (after --); one argument is run by a shell")
    .option("--cwd <dir>", "working directory in the sandbox")
    .option("--timeout <seconds>", "kill it after this many seconds")
    .option("-e, --env <KEY=VALUE>", "an environment variable (repeat)", collect)
    .option("-i, --stdin", "send this process's stdin to the command")
    .action(async (id: string, cmd: string[], opts: { cwd?: string; timeout?: string; env?: string[]; stdin?: boolean }) => {
      const sbx = await Sandbox.connect(id);
      const env = parsePairs(opts.env, "--env");
      const stream = sbx.execStream(cmd.length === 1 ? cmd[0]! : cmd, {
        ...(opts.cwd ? { cwd: opts.cwd } : {}), ...(opts.timeout ? { timeoutSeconds: Number(opts.timeout) } : {}),
        ...(env ? { env } : {}), ...(opts.stdin ? { stdin: new Uint8Array(await readStdin()) } : {}),
      });
      for await (const chunk of stream) (chunk.stream === "stdout" ? process.stdout : process.stderr).write(chunk.data);
      const exit = await stream.wait();
      const code = exit.timedOut ? 124 : exit.exitCode ?? (exit.signal ? 128 + exit.signal : 1);
      await new Promise<void>((r) => process.stdout.write("", () => r()));
      process.exit(code);
    });
}
