import { resolve } from "node:path";
import type { Command } from "commander";
import { UsageError } from "../output.js";
import { logLine } from "./options.js";

/** The CA's directory: `--dir`, else DEN_CA_DIR; a clear refusal with neither. */
export function caDir(given: string | undefined, verb: string): string {
  const dir = given ?? process.env.DEN_CA_DIR;
  if (!dir) throw new UsageError(`den ca ${verb} needs the CA's directory: --dir DIR or DEN_CA_DIR`);
  return resolve(dir);
}

/** A positive number from an option (undefined when it is not given). */
export function positive(v: string | undefined, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new UsageError(`${flag} wants a positive number, got ${JSON.stringify(v)}`);
  return n;
}

/** `den ca init [--dir DIR]`: makes the deployment's CA; prints its fingerprint. */
export function registerCaInit(ca: Command): void {
  ca
    .command("init")
    .description("make the deployment's certificate authority in DIR (ca.crt, and ca.key mode 0600; never overwrites one); prints its SHA-256 fingerprint")
    .option("--dir <dir>", "the CA's directory, made 0700 (env DEN_CA_DIR)")
    .option("--days <days>", "how long the CA's certificate is valid", "3650")
    .option("--name <name>", "the CA's common name", "Den deployment CA")
    .action(async (opts: { dir?: string; days: string; name: string }) => {
      const { initCa } = await import("@den/pki");
      const dir = caDir(opts.dir, "init");
      const days = positive(opts.days, "--days")!;
      if (!Number.isInteger(days)) throw new UsageError(`--days wants a whole number, got ${opts.days}`);
      const made = await initCa(dir, { commonName: opts.name, days });
      process.stdout.write(`${made.fingerprint}\n`);
      logLine(`CA in ${dir}: ca.crt (share it) and ca.key (the control planes' alone; back it up). The line above is its SHA-256 fingerprint.`);
    });
}
