import type { Command } from "commander";
import { Templates } from "@den/sdk";
import { collect } from "../output.js";

/**
 * `den template create`: asks a running `den serve` (DEN_API_URL, DEN_API_KEY) to build a
 * template from a template, a checkpoint or an OCI image, plus setup commands.
 */
export function registerTemplateCreate(parent: Command): void {
  parent
    .command("create")
    .description("build a template on a running server: a source plus setup commands, captured with its memory")
    .argument("<name>", "the new template's name")
    .option("--from <template>", "start from this template", "base")
    .option("--from-checkpoint <id>", "start from a checkpoint instead")
    .option("--from-image <ref>", "or from an OCI image: python:3.12, host:port/repo:tag, ...@sha256:...")
    .option("--registry-user <name>", "the image registry's user name (password from DEN_REGISTRY_PASSWORD)")
    .option("--start <command>", "image builds: a command kept running in every sandbox (default: the image's CMD)")
    .option("--ready <command>", "image builds: wait until this exits 0, then bake")
    .option("--vcpus <n>", "image builds: vCPUs of the template")
    .option("--memory <mb>", "image builds: memory of the template, MiB")
    .option("--force", "build again even if the same content was built before")
    .option("--run <command>", "a setup command (repeatable, run in order; each must exit 0)", collect, [] as string[])
    .option("--timeout <seconds>", "per setup command", "600")
    .option("--json", "print the template as JSON")
    .action(async (name: string, opts: {
      from: string; fromCheckpoint?: string; fromImage?: string; registryUser?: string; start?: string; ready?: string; vcpus?: string; memory?: string; force?: boolean;
      run: string[]; timeout: string; json?: boolean;
    }) => {
      const t0 = Date.now();
      const password = process.env.DEN_REGISTRY_PASSWORD;
      if (opts.registryUser && !password) throw new Error("--registry-user needs the password in DEN_REGISTRY_PASSWORD (never on the command line)");
      const source = opts.fromImage
        ? { fromImage: opts.registryUser ? { ref: opts.fromImage, credentials: { username: opts.registryUser, password: password! } } : opts.fromImage }
        : opts.fromCheckpoint ? { fromCheckpoint: opts.fromCheckpoint } : { fromTemplate: opts.from };
      const t = await Templates.create({
        name, setup: opts.run, setupTimeoutSeconds: Number(opts.timeout), ...source,
        ...(opts.start ? { startCmd: opts.start } : {}), ...(opts.ready ? { readyCmd: opts.ready } : {}),
        ...(opts.vcpus ? { vcpus: Number(opts.vcpus) } : {}), ...(opts.memory ? { memoryMb: Number(opts.memory) } : {}), ...(opts.force ? { force: true } : {}),
      });
      if (opts.json) process.stdout.write(JSON.stringify(t, null, 2) + "\n");
      else process.stdout.write(`${t.name}@${t.version} (${((Date.now() - t0) / 1000).toFixed(1)} s)\n`);
    });
}
