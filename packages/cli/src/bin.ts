#!/usr/bin/env node
import { Command } from "commander";
import { DenError } from "@den/protocol";
import { DenApiError, DenConfigError } from "@den/sdk";
import { registerTemplateBuild } from "./commands/template-build.js";
import { registerTemplateCreate } from "./commands/template-create.js";
import { registerTemplateLs } from "./commands/template-ls.js";
import { registerTemplateBuilds } from "./commands/template-builds.js";
import { registerTemplateLogs } from "./commands/template-logs.js";
import { registerTemplateCancel } from "./commands/template-cancel.js";
import { registerDemo } from "./commands/demo.js";
import { registerServe } from "./commands/serve.js";
import { registerHostRun } from "./commands/host-run.js";
import { registerUsage } from "./commands/usage.js";
import { registerPort } from "./commands/port.js";
import { registerForward } from "./commands/forward.js";
import { registerMcp } from "./commands/mcp.js";
import { registerCreate } from "./commands/create.js";
import { registerLs } from "./commands/ls.js";
import { registerExec } from "./commands/exec.js";
import { registerRunCode } from "./commands/run-code.js";
import { registerShell } from "./commands/shell.js";
import { registerCp } from "./commands/cp.js";
import { registerHibernate } from "./commands/hibernate.js";
import { registerWake } from "./commands/wake.js";
import { registerSnapshot } from "./commands/snapshot.js";
import { registerRestore } from "./commands/restore.js";
import { registerFork } from "./commands/fork.js";
import { registerRm } from "./commands/rm.js";
import { registerEvents } from "./commands/events.js";
import { registerKeysCreate } from "./commands/keys-create.js";
import { registerKeysLs } from "./commands/keys-ls.js";
import { registerKeysRevoke } from "./commands/keys-revoke.js";
import { registerWebhookAdd } from "./commands/webhook-add.js";
import { registerWebhookLs } from "./commands/webhook-ls.js";
import { registerWebhookRm } from "./commands/webhook-rm.js";
import { registerWebhookDeliveries } from "./commands/webhook-deliveries.js";
import { registerWebhookRedeliver } from "./commands/webhook-redeliver.js";
import { registerHostsLs } from "./commands/hosts-ls.js";
import { registerHostsDrain } from "./commands/hosts-drain.js";
import { registerHostsRm } from "./commands/hosts-rm.js";
import { registerHostsRevoke } from "./commands/hosts-revoke.js";
import { registerHostsUndrain } from "./commands/hosts-undrain.js";
import { registerHostsTokenCreate } from "./commands/hosts-token-create.js";
import { registerCaInit } from "./commands/ca-init.js";
import { registerCaIssue } from "./commands/ca-issue.js";
import { registerVolumeCreate } from "./commands/volume-create.js";
import { registerVolumeLs } from "./commands/volume-ls.js";
import { registerVolumeRm } from "./commands/volume-rm.js";
import { registerVolumeCp } from "./commands/volume-cp.js";
import { UsageError } from "./output.js";

// `den usage --json | head` closes the pipe early: that is the reader's choice, not an error.
process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  if (e.code === "EPIPE") process.exit(0);
  throw e;
});

const program = new Command();
program.name("den").description("Long-running microVM sandboxes for AI agents").version("0.1.0");
program.option("--data-dir <dir>", "where templates, sandboxes and snapshots live (env DEN_DATA_DIR)");

registerCreate(program);
registerLs(program);
registerExec(program);
registerRunCode(program);
registerShell(program);
registerCp(program);
registerHibernate(program);
registerWake(program);
registerSnapshot(program);
registerRestore(program);
registerFork(program);
registerRm(program);
registerEvents(program);
const keys = program.command("keys").description("manage API keys (needs an admin key)");
registerKeysCreate(keys);
registerKeysLs(keys);
registerKeysRevoke(keys);
const webhook = program.command("webhook").description("webhooks: this owner's sandbox lifecycle events POSTed to a URL");
registerWebhookAdd(webhook);
registerWebhookLs(webhook);
registerWebhookRm(webhook);
registerWebhookDeliveries(webhook);
registerWebhookRedeliver(webhook);
const volume = program.command("volume").description("volumes: named filesystems that outlive every sandbox that mounts them");
registerVolumeCreate(volume);
registerVolumeLs(volume);
registerVolumeRm(volume);
registerVolumeCp(volume);
const hosts = program.command("hosts").description("the host agents sandboxes run on (needs an admin key)");
registerHostsLs(hosts);
registerHostsDrain(hosts);
registerHostsUndrain(hosts);
registerHostsRm(hosts);
registerHostsRevoke(hosts);
registerHostsTokenCreate(hosts.command("token").description("one-time join tokens: a machine joins the fleet with one and gets its certificate"));
const ca = program.command("ca").description("the deployment's certificate authority: make it, and issue a machine's certificate by hand");
registerCaInit(ca);
registerCaIssue(ca);
const template = program.command("template").description("build, create and list sandbox templates, and follow their builds");
registerTemplateBuild(template);
registerTemplateLs(template);
registerTemplateCreate(template);
registerTemplateBuilds(template);
registerTemplateLogs(template);
registerTemplateCancel(template);
registerDemo(program);
registerServe(program);
registerHostRun(program.command("host").description("run this machine's host agent on its own"));
registerUsage(program);
registerPort(program);
registerForward(program);
registerMcp(program);

/** Error messages on one line (some carry JSON), bounded. */
const oneLine = (m: string) => m.replace(/\s*\n\s*/g, " ").slice(0, 1000);

try {
  await program.parseAsync(process.argv);
} catch (e) {
  // A user mistake or a known failure is one clear line and a non-zero exit, never a stack trace.
  if (e instanceof DenError || e instanceof DenApiError) {
    process.stderr.write(`den: ${e.code}: ${oneLine(e.message)}\n`);
    process.exit(e.status >= 500 ? 2 : 1);
  }
  if (e instanceof UsageError || e instanceof DenConfigError) {
    process.stderr.write(`den: ${e.message}\n`);
    process.exit(1);
  }
  // The server cannot be reached: say where we looked, not a stack.
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  const code = (e as { code?: string }).code ?? cause?.code;
  if ((e instanceof TypeError && e.message === "fetch failed") || (code && /^(ECONNREFUSED|ECONNRESET|ENOTFOUND|EHOSTUNREACH|ETIMEDOUT)$/.test(code))) {
    process.stderr.write(`den: cannot reach the Den API at ${process.env.DEN_API_URL ?? "http://127.0.0.1:8787"}: ${cause?.message ?? cause?.code ?? (e as Error).message}\n`);
    process.exit(2);
  }
  throw e;
}
