import type { Command } from "commander";
import { logLine, openRuntime } from "./options.js";

export function registerDemo(program: Command): void {
  program
    .command("demo")
    .description("create a sandbox from a template, run a command in it, and destroy it")
    .option("-t, --template <name>", "template", "base")
    .option("-c, --command <cmd>", "shell command to run", "echo \"hello from $(uname -n), $(nproc) vCPU, $(python3 --version)\"; df -h / | tail -1")
    .action(async (opts: { template: string; command: string }, cmd: Command) => {
      const rt = await openRuntime(cmd);
      try {
        let t = performance.now();
        const sbx = await rt.create({ template: opts.template });
        logLine(`created ${sbx.id} from ${sbx.info.template.name}@${sbx.info.template.version} in ${(performance.now() - t).toFixed(0)} ms`);
        try {
          t = performance.now();
          const r = await sbx.exec(opts.command);
          process.stdout.write(r.stdout);
          process.stderr.write(r.stderr);
          logLine(`exec exited ${r.exitCode} in ${(performance.now() - t).toFixed(0)} ms`);
          process.exitCode = r.exitCode ?? 1;
        } finally {
          await sbx.destroy();
          logLine(`destroyed ${sbx.id}`);
        }
      } finally {
        rt.close();
      }
    });
}
