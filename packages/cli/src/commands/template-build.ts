import type { Command } from "commander";
import { DenError } from "@den/protocol";
import { logLine, openRuntime } from "./options.js";

export function registerTemplateBuild(parent: Command): void {
  parent
    .command("build")
    .description("build a template from its recipe (cached) and bake its snapshot")
    .argument("[recipe]", "recipe name (packages/images/recipes/<name>.json) or path to a recipe file", "base")
    .option("--json", "print the template as JSON")
    .action(async (recipeArg: string, opts: { json?: boolean }, cmd: Command) => {
      const { buildImage, loadRecipe, missingHostTools } = await import("@den/images");
      const { bakeTemplate, cacheDir } = await import("@den/runtime");
      const missing = await missingHostTools();
      if (missing.length) throw new DenError("build_failed", `missing host packages: ${missing.join(" ")} (run scripts/install-deps.sh)`);
      const recipe = loadRecipe(recipeArg);
      const image = await buildImage(recipe, { cacheDir: cacheDir(), log: logLine });
      const rt = await openRuntime(cmd);
      try {
        const t = await bakeTemplate(rt, recipe, image, logLine);
        if (opts.json) {
          process.stdout.write(JSON.stringify({ name: t.name, version: t.version, reused: t.reused, ...t.manifest.vm, host: t.manifest.host }, null, 2) + "\n");
        } else {
          process.stdout.write(`${t.name}@${t.version}${t.reused ? " (unchanged)" : ""}\n`);
        }
      } finally {
        rt.close();
      }
    });
}
