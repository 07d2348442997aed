import type { Command } from "commander";
import { Volumes } from "@den/sdk";

/** `den volume rm NAME`: refused (409) while a sandbox that is not destroyed mounts it. */
export function registerVolumeRm(volume: Command): void {
  volume
    .command("rm")
    .description("delete a volume and its data (not while a sandbox mounts it)")
    .argument("<name>", "volume name")
    .action(async (name: string) => {
      await Volumes.delete(name);
      process.stdout.write(`${name} deleted\n`);
    });
}
