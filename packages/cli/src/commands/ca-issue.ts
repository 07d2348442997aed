import { access } from "node:fs/promises";
import { join, resolve } from "node:path";
import { Option, type Command } from "commander";
import type { Identity } from "@den/pki";
import { UsageError, collect } from "../output.js";
import { logLine } from "./options.js";
import { caDir, positive } from "./ca-init.js";

/**
 * `den ca issue --dir DIR --kind K --id ID --out OUTDIR`: a key and a certificate made here,
 * for a machine that cannot join with a token (the first control-plane replica) or to
 * bootstrap one: key.pem (0600), cert.pem and ca.pem in OUTDIR.
 */
export function registerCaIssue(ca: Command): void {
  ca
    .command("issue")
    .description("make a machine's key and certificate from the CA here: key.pem (0600), cert.pem and ca.pem in OUTDIR")
    .option("--dir <dir>", "the CA's directory (env DEN_CA_DIR)")
    .addOption(new Option("--kind <kind>", "what the machine is").choices(["host", "control-plane"]).makeOptionMandatory())
    .requiredOption("--id <id>", "its id (a host's instance id, a replica's id): letters, digits, _ and -")
    .requiredOption("--out <dir>", "where its key.pem, cert.pem and ca.pem go (made 0700)")
    .option("--ttl-hours <hours>", "how long the certificate is valid (env DEN_CERT_TTL_HOURS; default 24)")
    .option("--dns <name>", "a DNS name the machine is reached by (repeatable)", collect)
    .option("--ip <address>", "an IP address the machine is reached at (repeatable)", collect)
    .option("--force", "replace a key and certificate already in OUTDIR")
    .action(async (opts: { dir?: string; kind: Identity["kind"]; id: string; out: string; ttlHours?: string; dns?: string[]; ip?: string[]; force?: boolean }) => {
      const { IDENTITY_FILES, issueMachine, loadCa, writeIdentityFiles } = await import("@den/pki");
      const dir = caDir(opts.dir, "issue");
      const ttlHours = positive(opts.ttlHours ?? process.env.DEN_CERT_TTL_HOURS, opts.ttlHours ? "--ttl-hours" : "DEN_CERT_TTL_HOURS") ?? 24;
      const out = resolve(opts.out);
      const keyFile = join(out, IDENTITY_FILES.key);
      if (!opts.force && (await access(keyFile).then(() => true, () => false))) throw new UsageError(`${keyFile} exists (--force replaces it)`);
      const authority = await loadCa(dir);
      const identity: Identity = { kind: opts.kind, id: opts.id };
      const cert = await issueMachine(authority, identity, { ttlHours, ...(opts.dns ? { dnsNames: opts.dns } : {}), ...(opts.ip ? { ips: opts.ip } : {}) });
      await writeIdentityFiles(out, { keyPem: cert.key, certPem: cert.cert, caPem: authority.certPem });
      process.stdout.write(`${out}\n`);
      logLine(`${opts.kind} ${opts.id}: certificate ${cert.serial}, valid until ${new Date(cert.notAfter).toISOString()}; key.pem, cert.pem and ca.pem in ${out}`);
    });
}
