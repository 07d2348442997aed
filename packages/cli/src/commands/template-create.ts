import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { Transform } from "node:stream";
import type { Command } from "commander";
import { c as tarCreate } from "tar";
import { DenApiError, Templates, type BuildContextInfo, type CreateTemplateSpec, type TemplateBuildLogLine } from "@den/sdk";
import { UsageError, bytes, collect, parsePairs } from "../output.js";
import { buildError, followBuild, logText } from "./template-logs.js";

/**
 * Tars a directory (its contents at the archive's root) into a temporary file while hashing
 * it, then uploads it by its digest: streamed from the file, never whole in memory.
 */
async function uploadDir(dir: string): Promise<BuildContextInfo> {
  const st = await stat(dir).catch(() => undefined);
  if (!st?.isDirectory()) throw new UsageError(`--context wants a directory, got ${JSON.stringify(dir)}`);
  const tmp = await mkdtemp(join(tmpdir(), "den-context-"));
  try {
    const file = join(tmp, "context.tar");
    const hash = createHash("sha256");
    const hasher = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        hash.update(chunk);
        cb(null, chunk);
      },
    });
    await pipeline(tarCreate({ cwd: dir, portable: true }, ["."]), hasher, createWriteStream(file));
    const digest = `sha256:${hash.digest("hex")}`;
    return await Templates.uploadContext(createReadStream(file), { digest });
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** Uploads a file (an image archive) by its sha256, hashed in a first read and streamed in a second. */
async function uploadFile(path: string): Promise<BuildContextInfo> {
  const st = await stat(path).catch(() => undefined);
  if (!st?.isFile()) throw new UsageError(`--from-archive wants a file, got ${JSON.stringify(path)}`);
  const hash = createHash("sha256");
  for await (const c of createReadStream(path)) hash.update(c as Buffer);
  return Templates.uploadContext(createReadStream(path), { digest: `sha256:${hash.digest("hex")}` });
}

/**
 * `den template create`: asks a running `den serve` (DEN_API_URL, DEN_API_KEY) to build a
 * template from a template, a checkpoint, an OCI image (or an image archive) or a Dockerfile, plus setup commands.
 * The build starts at once (wait: false); its log is printed as it comes (on stdout, or on
 * stderr with --json), and the command ends with the template's `name@version`, or with the
 * build's error on one line and a non-zero exit. Ctrl-C cancels the build.
 */
export function registerTemplateCreate(parent: Command): void {
  parent
    .command("create")
    .description("build a template on a running server (a template plus setup commands, an OCI image or archive, or a Dockerfile), printing its log as it goes")
    .argument("<name>", "the new template's name")
    .option("--from <template>", "start from this template", "base")
    .option("--from-checkpoint <id>", "start from a checkpoint instead")
    .option("--from-image <ref>", "or from an OCI image: python:3.12, host:port/repo:tag, ...@sha256:...")
    .option("--registry-user <name>", "the image registry's user name (password from DEN_REGISTRY_PASSWORD)")
    .option("--from-archive <file>", "or from an image archive: an OCI layout or `docker save` tar (uploaded)")
    .option("--dockerfile <path>", "or from a Dockerfile (its FROM names an image or a template)")
    .option("--context <dir>", "Dockerfile builds: the directory COPY takes files from (tarred and uploaded)")
    .option("--build-arg <key=value>", "Dockerfile builds: a value for an ARG (repeatable)", collect, [] as string[])
    .option("--start <command>", "image, archive and Dockerfile builds: a command kept running in every sandbox (default: the image's CMD)")
    .option("--ready <command>", "image, archive and Dockerfile builds: wait until this exits 0, then bake")
    .option("--vcpus <n>", "image, archive and Dockerfile builds: vCPUs of the template")
    .option("--memory <mb>", "image, archive and Dockerfile builds: memory of the template, MiB")
    .option("--force", "build again even if the same content was built before")
    .option("--run <command>", "a setup command (repeatable, run in order; each must exit 0)", collect, [] as string[])
    .option("--timeout <seconds>", "per setup command", "600")
    .option("--json", "print the template as JSON (the log goes to stderr)")
    .action(async (name: string, opts: {
      from: string; fromCheckpoint?: string; fromImage?: string; fromArchive?: string; registryUser?: string; dockerfile?: string; context?: string; buildArg: string[];
      start?: string; ready?: string; vcpus?: string; memory?: string; force?: boolean; run: string[]; timeout: string; json?: boolean;
    }) => {
      const t0 = Date.now();
      const password = process.env.DEN_REGISTRY_PASSWORD;
      if (opts.registryUser && !password) throw new UsageError("--registry-user needs the password in DEN_REGISTRY_PASSWORD (never on the command line)");
      if ([opts.fromCheckpoint, opts.fromImage, opts.fromArchive, opts.dockerfile].filter((x) => x !== undefined).length > 1) {
        throw new UsageError("give at most one of --from-checkpoint, --from-image, --from-archive and --dockerfile");
      }
      if (!opts.dockerfile && (opts.context !== undefined || opts.buildArg.length)) throw new UsageError("--context and --build-arg go with --dockerfile");
      const buildArgs = parsePairs(opts.buildArg, "--build-arg");
      const progress = (s: string) => process.stderr.write(s);

      let source: Partial<CreateTemplateSpec>;
      if (opts.dockerfile) {
        const dockerfile = await readFile(opts.dockerfile, "utf8").catch((e: NodeJS.ErrnoException) => {
          throw new UsageError(`cannot read the Dockerfile ${JSON.stringify(opts.dockerfile)}: ${e.code ?? e.message}`);
        });
        source = { dockerfile, ...(buildArgs ? { buildArgs } : {}) };
        if (opts.context !== undefined) {
          const ctx = await uploadDir(opts.context);
          progress(`context ${opts.context}: ${bytes(ctx.size)} uploaded (${ctx.context.slice(0, 19)})\n`);
          source.context = ctx.context;
        }
      } else if (opts.fromArchive) {
        const archive = await uploadFile(opts.fromArchive);
        progress(`archive ${opts.fromArchive}: ${bytes(archive.size)} uploaded (${archive.context.slice(0, 19)})\n`);
        source = { fromArchive: archive.context };
      } else if (opts.fromImage) {
        source = { fromImage: opts.registryUser ? { ref: opts.fromImage, credentials: { username: opts.registryUser, password: password! } } : opts.fromImage };
      } else {
        source = opts.fromCheckpoint ? { fromCheckpoint: opts.fromCheckpoint } : { fromTemplate: opts.from };
      }
      const build = await Templates.startBuild({
        name, ...source,
        ...(opts.run.length ? { setup: opts.run } : {}), setupTimeoutSeconds: Number(opts.timeout),
        ...(opts.start ? { startCmd: opts.start } : {}), ...(opts.ready ? { readyCmd: opts.ready } : {}),
        ...(opts.vcpus ? { vcpus: Number(opts.vcpus) } : {}), ...(opts.memory ? { memoryMb: Number(opts.memory) } : {}), ...(opts.force ? { force: true } : {}),
      }).catch((e: unknown) => {
        // The API's words for a COPY without a context name its route; say the flag instead.
        if (e instanceof DenApiError && e.code === "invalid_argument" && e.details?.instruction === "COPY" && source.context === undefined) {
          throw new UsageError(`Dockerfile line ${String(e.details.line)}: COPY needs a build context: give --context DIR`);
        }
        throw e;
      });
      progress(`build ${build.id} of ${build.name} started (den template logs ${build.id} --follow; Ctrl-C cancels it)\n`);

      // Ctrl-C: cancel the build and keep following until it says it ended; again: leave at once.
      let interrupted = false;
      const onSigint = () => {
        if (interrupted) process.exit(130);
        interrupted = true;
        progress(`cancelling build ${build.id} (Ctrl-C again to stop waiting)\n`);
        Templates.cancelBuild(build.id).catch((e: unknown) => progress(`den: could not cancel build ${build.id}: ${(e as Error).message}\n`));
      };
      process.on("SIGINT", onSigint);
      const out = opts.json ? process.stderr : process.stdout;
      let ended;
      try {
        ended = await followBuild(build.id, (l: TemplateBuildLogLine) => out.write(logText(l)));
      } finally {
        process.off("SIGINT", onSigint);
      }
      if (ended.state !== "ready" || !ended.version) throw buildError(ended);
      const secs = ((Date.now() - t0) / 1000).toFixed(1);
      if (opts.json) {
        const t = (await Templates.list()).find((x) => x.name === ended.name && x.version === ended.version);
        process.stdout.write(JSON.stringify(t ?? ended, null, 2) + "\n");
      } else {
        process.stdout.write(`${ended.name}@${ended.version} (${secs} s)\n`);
      }
    });
}
