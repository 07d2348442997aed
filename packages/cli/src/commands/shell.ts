import type { Command } from "commander";
import { Sandbox } from "@den/sdk";

/**
 * `den shell ID`: an interactive terminal in the sandbox. The local terminal goes raw, so
 * every key (Ctrl-C included) reaches the guest's terminal; a resize is passed on; it exits
 * with the shell's exit code.
 */
export function registerShell(program: Command): void {
  program
    .command("shell")
    .description("an interactive shell in a sandbox (Ctrl-C reaches the guest; exit to leave)")
    .argument("<id>", "sandbox id")
    .option("--cmd <cmd>", "run this instead of a login shell")
    .option("--cwd <dir>", "working directory in the sandbox")
    .action(async (id: string, opts: { cmd?: string; cwd?: string }) => {
      const sbx = await Sandbox.connect(id);
      const size = () => ({ rows: process.stdout.rows || 24, cols: process.stdout.columns || 80 });
      const term = await sbx.pty({
        ...size(), ...(opts.cmd ? { cmd: opts.cmd } : {}), ...(opts.cwd ? { cwd: opts.cwd } : {}),
        onData: (d) => process.stdout.write(d),
      });
      const raw = process.stdin.isTTY === true;
      if (raw) process.stdin.setRawMode(true);
      process.stdin.on("data", (d: Buffer) => term.write(d));
      process.stdin.resume();
      const onResize = () => void term.resize(size().rows, size().cols);
      process.stdout.on("resize", onResize);
      try {
        const exit = await term.wait();
        process.exitCode = exit.exitCode ?? (exit.signal ? 128 + exit.signal : 1);
      } finally {
        process.stdout.off("resize", onResize);
        if (raw) process.stdin.setRawMode(false);
        process.stdin.pause();
      }
    });
}
