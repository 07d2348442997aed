import { execFileSync } from "node:child_process";

export async function runTool(cmd: string, args: string[]): Promise<void> {
  execFileSync(cmd, args, { stdio: ["ignore", "ignore", "inherit"] });
}
