import type { Command } from "commander";
import { ERROR_STATUS } from "@den/protocol";
import { DenApiError, Templates, apiError, type TemplateBuild, type TemplateBuildLogLine } from "@den/sdk";
import { UsageError } from "../output.js";

/** How many times in a row a followed log may break (a dropped connection) before we give up. */
const MAX_RESUMES = 5;

/**
 * Prints a build's log from line `from` as it comes (`print` for each line) until the build ends, resuming
 * after the last line seen if the stream breaks, and resolves with the build as it ended.
 */
export async function followBuild(id: string, print: (l: TemplateBuildLogLine) => void, from = 0): Promise<TemplateBuild> {
  let offset = from;
  let broken = 0;
  for (;;) {
    try {
      for await (const l of Templates.buildLogs(id, { offset, follow: true })) {
        print(l);
        offset = l.seq + 1;
        broken = 0;
      }
    } catch (e) {
      // An API error (the build is gone, the key revoked) is the answer; a broken stream is retried.
      if (e instanceof DenApiError || ++broken > MAX_RESUMES) throw e;
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    const b = await Templates.build(id);
    if (b.state !== "building") return b;
    // The stream ended while the build goes on (a proxy's timeout): follow it again from where we were.
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** The error a build that did not end `ready` ended with, as the API would have thrown it. */
export function buildError(b: TemplateBuild): DenApiError {
  const code = b.error?.code ?? (b.state === "cancelled" ? "aborted" : "internal");
  const message = b.error?.message ?? `template build ${b.id} ended ${b.state}`;
  const status = Object.hasOwn(ERROR_STATUS, code) ? ERROR_STATUS[code as keyof typeof ERROR_STATUS] : 500;
  return apiError(code, message, status, b.error?.details);
}

/** One log line as printed: the message, `error: ` before an error line's. */
export function logText(l: TemplateBuildLogLine): string {
  return `${l.level === "error" ? "error: " : ""}${l.message}\n`;
}

/** `den template logs BUILD_ID [--follow]`: a template build's log. */
export function registerTemplateLogs(parent: Command): void {
  parent
    .command("logs")
    .description("a template build's log; --follow keeps printing until the build ends")
    .argument("<build-id>", "the build's id (den template builds lists them)")
    .option("-f, --follow", "keep printing new lines until the build ends")
    .option("--offset <n>", "start at this line (0: the first)", "0")
    .option("--json", "one JSON object per line")
    .action(async (id: string, opts: { follow?: boolean; offset: string; json?: boolean }) => {
      const offset = Number(opts.offset);
      if (!Number.isInteger(offset) || offset < 0) throw new UsageError(`--offset wants a line number, got ${JSON.stringify(opts.offset)}`);
      const print = (l: TemplateBuildLogLine) => process.stdout.write(opts.json ? JSON.stringify(l) + "\n" : logText(l));
      if (!opts.follow) {
        for await (const l of Templates.buildLogs(id, { offset })) print(l);
        return;
      }
      await followBuild(id, print, offset);
    });
}
