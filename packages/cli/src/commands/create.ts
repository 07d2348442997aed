import type { Command } from "commander";
import { Sandbox, type VolumeMount } from "@den/sdk";
import { UsageError, collect, parsePairs, printJson, sandboxJson, withSpinner } from "../output.js";

/** `--volume NAME:/path[:ro]` values. */
export function parseVolumes(specs: string[] | undefined): VolumeMount[] | undefined {
  if (!specs?.length) return undefined;
  return specs.map((v) => {
    const m = /^([^:]+):(\/[^:]*)(?::(ro|rw))?$/.exec(v);
    if (!m) throw new UsageError(`--volume wants NAME:/path or NAME:/path:ro, got ${JSON.stringify(v)}`);
    return { name: m[1]!, path: m[2]!, ...(m[3] === "ro" ? { readOnly: true } : {}) };
  });
}

/** `den create`: a new sandbox; prints its id (or the whole sandbox with --json). */
export function registerCreate(program: Command): void {
  program
    .command("create")
    .description("create a sandbox from a template; prints its id")
    .option("--template <name>", "template name or name@version (default: the server's)")
    .option("--ttl <seconds>", "hard deadline from now, in seconds (the server default is 3600)")
    .option("--persistent", "hibernate instead of being destroyed when idle")
    .option("--idle-timeout <seconds>", "seconds without activity before it hibernates")
    .option("--meta <key=value>", "a metadata label (repeat for more)", collect)
    .option("--memory <mb>", "memory in MiB")
    .option("--vcpus <n>", "vCPUs")
    .option("--egress <mode>", "network: none (default), allowlist or open")
    .option("--allow <target>", "with --egress allowlist: a domain, address or CIDR (repeat)", collect)
    .option("--volume <name:/path[:ro]>", "mount a volume (repeat; :ro for read-only)", collect)
    .option("--json", "print the sandbox as JSON")
    .action(async (opts: { template?: string; ttl?: string; persistent?: boolean; idleTimeout?: string; meta?: string[]; memory?: string; vcpus?: string; egress?: string; allow?: string[]; volume?: string[]; json?: boolean }) => {
      const metadata = parsePairs(opts.meta);
      const volumes = parseVolumes(opts.volume);
      const sbx = await withSpinner("creating sandbox", () => Sandbox.create({
        ...(opts.template ? { template: opts.template } : {}),
        ...(opts.ttl ? { ttlSeconds: Number(opts.ttl) } : {}),
        ...(opts.persistent ? { persistent: true } : {}),
        ...(opts.idleTimeout ? { idleTimeoutSeconds: Number(opts.idleTimeout) } : {}),
        ...(metadata ? { metadata } : {}),
        ...(opts.memory ? { memoryMb: Number(opts.memory) } : {}),
        ...(opts.vcpus ? { vcpus: Number(opts.vcpus) } : {}),
        ...(opts.egress ? { network: { egress: opts.egress as "none" | "allowlist" | "open", ...(opts.allow ? { allow: opts.allow } : {}) } } : {}),
        ...(volumes ? { volumes } : {}),
      }));
      if (opts.json) printJson(sandboxJson(sbx.info));
      else process.stdout.write(`${sbx.id}\n`);
    });
}
