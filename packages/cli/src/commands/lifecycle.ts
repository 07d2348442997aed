/** Shared by the one-verb-per-file lifecycle commands: connect, act under a spinner, print. */
import { Sandbox, type SandboxInfo } from "@den/sdk";
import { printJson, sandboxJson, withSpinner } from "../output.js";

export async function actOn(id: string, label: string, act: (sbx: Sandbox) => Promise<SandboxInfo>, json?: boolean): Promise<void> {
  const sbx = await Sandbox.connect(id);
  const info = await withSpinner(`${label} ${id}`, () => act(sbx));
  if (json) printJson(sandboxJson(info));
  else process.stdout.write(`${info.id} ${info.state}${info.state === "hibernated" && info.hibernateMode ? ` (${info.hibernateMode})` : ""}\n`);
}
