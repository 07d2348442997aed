#!/usr/bin/env node
import { Command } from "commander";
import { DenError } from "@den/protocol";
import { DenApiError } from "@den/sdk";
import { registerTemplateBuild } from "./commands/template-build.js";
import { registerTemplateCreate } from "./commands/template-create.js";
import { registerTemplateLs } from "./commands/template-ls.js";
import { registerDemo } from "./commands/demo.js";
import { registerServe } from "./commands/serve.js";
import { registerUsage } from "./commands/usage.js";
import { registerPort } from "./commands/port.js";
import { registerForward } from "./commands/forward.js";

// `den usage --json | head` closes the pipe early: that is the reader's choice, not an error.
process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  if (e.code === "EPIPE") process.exit(0);
  throw e;
});

const program = new Command();
program.name("den").description("Long-running microVM sandboxes for AI agents").version("0.1.0");
program.option("--data-dir <dir>", "where templates, sandboxes and snapshots live (env DEN_DATA_DIR)");

const template = program.command("template").description("build, create and list sandbox templates");
registerTemplateBuild(template);
registerTemplateLs(template);
registerTemplateCreate(template);
registerDemo(program);
registerServe(program);
registerUsage(program);
registerPort(program);
registerForward(program);

try {
  await program.parseAsync(process.argv);
} catch (e) {
  // A user mistake or a known failure is one clear line and a non-zero exit, never a stack trace.
  if (e instanceof DenError || e instanceof DenApiError) {
    process.stderr.write(`den: ${e.code}: ${e.message}\n`);
    process.exit(e.status >= 500 ? 2 : 1);
  }
  throw e;
}
