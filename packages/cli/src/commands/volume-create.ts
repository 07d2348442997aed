import type { Command } from "commander";
import { Volumes } from "@den/sdk";
import { UsageError, printJson } from "../output.js";

/** `den volume create NAME --size MB`: an empty volume; prints its name (or the volume with --json). */
export function registerVolumeCreate(volume: Command): void {
  volume
    .command("create")
    .description("create an empty volume (it outlives every sandbox that mounts it)")
    .argument("<name>", "1 to 63 lowercase letters, digits and -")
    .requiredOption("--size <mb>", "its size in MiB (host disk is taken only as it is written)")
    .option("--json", "print the volume as JSON")
    .action(async (name: string, opts: { size: string; json?: boolean }) => {
      const sizeMb = Number(opts.size);
      if (!Number.isInteger(sizeMb) || sizeMb <= 0) throw new UsageError(`--size wants a whole number of MiB, got ${JSON.stringify(opts.size)}`);
      const v = await Volumes.create({ name, sizeMb });
      if (opts.json) printJson(v);
      else process.stdout.write(`${v.name}\n`);
    });
}
