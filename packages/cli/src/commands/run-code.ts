import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Command } from "commander";
import { Sandbox, type ExecutionResult } from "@den/sdk";
import { UsageError, collect, parsePairs, printJson, printTable } from "../output.js";

/** Reads all of stdin (the code, when it is not an argument). */
async function readStdin(): Promise<string> {
  const parts: Buffer[] = [];
  for await (const c of process.stdin) parts.push(c as Buffer);
  return Buffer.concat(parts).toString("utf8");
}

/** The binary and vector forms a result may carry, with their file extensions. */
const MEDIA = [["png", "image/png"], ["jpeg", "image/jpeg"], ["svg", "image/svg+xml"], ["pdf", "application/pdf"]] as const;

/**
 * `den run-code ID [CODE]`: runs code in a sandbox's code interpreter (a sandbox made from
 * `code-interpreter-v1`), printing what it prints as it comes and each result's text (an
 * image as a `[image/png, N bytes]` line, or saved with --save-images); an exception's
 * traceback goes to stderr and the exit status is 1. `--contexts` lists the contexts.
 */
export function registerRunCode(program: Command): void {
  program
    .command("run-code")
    .description("run code in a sandbox's code interpreter (template code-interpreter-v1); the code is read from stdin when not given")
    .argument("<id>", "sandbox id")
    .argument("[code]", "the code (default: read from stdin)")
    .option("-l, --language <language>", "the language's default context (python unless given)")
    .option("-c, --context <id>", "run in this code context (its state persists between runs)")
    .option("-e, --env <KEY=VALUE>", "an environment variable for this run (repeat)", collect)
    .option("--timeout <seconds>", "give up (and interrupt the run) after this many seconds")
    .option("--save-images <dir>", "write each image result to DIR (result-N.png, ...)")
    .option("--contexts", "list the sandbox's code contexts instead of running code")
    .option("--json", "print the Execution (or the contexts) as JSON instead")
    .action(async (id: string, code: string | undefined, opts: { language?: string; context?: string; env?: string[]; timeout?: string; saveImages?: string; contexts?: boolean; json?: boolean }) => {
      const sbx = await Sandbox.connect(id);
      if (opts.contexts) {
        const list = await sbx.codeContexts.list();
        if (opts.json) printJson(list);
        else printTable([["ID", "LANGUAGE", "CWD"], ...list.map((c) => [c.id, c.language, c.cwd])]);
        return;
      }
      if (opts.language && opts.context) throw new UsageError("give --language or --context, not both (a context has its language)");
      const timeout = opts.timeout !== undefined ? Number(opts.timeout) : undefined;
      if (timeout !== undefined && !(timeout > 0)) throw new UsageError(`--timeout wants a number of seconds, got ${JSON.stringify(opts.timeout)}`);
      const source = code ?? (await readStdin());
      const envs = parsePairs(opts.env, "--env");
      if (opts.saveImages) await mkdir(opts.saveImages, { recursive: true });
      let n = 0;
      const live = !opts.json;
      const onResult = async (r: ExecutionResult) => {
        n++;
        const media = MEDIA.filter(([k]) => r[k] !== undefined);
        for (const [k, mime] of media) {
          const data = k === "svg" ? Buffer.from(r[k]!, "utf8") : Buffer.from(r[k]!, "base64");
          let where = "";
          if (opts.saveImages) {
            const file = join(opts.saveImages, `result-${n}.${k}`);
            await writeFile(file, data);
            where = `: ${file}`;
          }
          if (live) process.stdout.write(`[${mime}, ${data.length} bytes${where}]\n`);
        }
        // A figure's text is its repr ("<Figure size ...>"): the image line says more.
        if (live && !media.length && r.text !== undefined) process.stdout.write(r.text.endsWith("\n") ? r.text : `${r.text}\n`);
      };
      const execution = await sbx.runCode(source, {
        ...(opts.language ? { language: opts.language } : {}),
        ...(opts.context ? { context: opts.context } : {}),
        ...(envs ? { envs } : {}),
        ...(timeout !== undefined ? { timeoutMs: timeout * 1000 } : {}),
        onResult,
        ...(live ? { onStdout: (s: string) => void process.stdout.write(s), onStderr: (s: string) => void process.stderr.write(s) } : {}),
      });
      if (opts.json) printJson(execution);
      else if (execution.error) {
        const tb = execution.error.traceback || `${execution.error.name}: ${execution.error.value}`;
        process.stderr.write(tb.endsWith("\n") ? tb : `${tb}\n`);
      }
      await new Promise<void>((r) => process.stdout.write("", () => r()));
      if (execution.error) process.exit(1);
    });
}
