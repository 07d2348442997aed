import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { DenError } from "@den/protocol";

/** What a template is made of. Its content hash (with the build scripts') is the template's version. */
export interface Recipe {
  name: string;
  description?: string;
  /** Debian suite to debootstrap. */
  suite: string;
  /** Debian meta package of the guest kernel (its image package is resolved by apt). */
  kernelPackage: string;
  /** Extra Debian packages in the root filesystem (on top of minbase, or of `from`'s tree). */
  packages: string[];
  /** Another recipe whose root filesystem this one starts from (its packages then installed by apt). */
  from?: string;
  vcpus: number;
  memoryMb: number;
  diskMb: number;
  /** Files of Den's put into the root filesystem: guest path -> path under packages/images. */
  files?: Record<string, string>;
  /** A service the template runs: started after boot, baked once `readyCmd` exits 0, so a create restores it running. */
  run?: RecipeRun;
}

export interface RecipeRun {
  startCmd: string;
  /** A shell command that exits 0 once the service is ready (polled). */
  readyCmd: string;
  readyTimeoutSeconds?: number;
  env?: Record<string, string>;
  workdir?: string;
  user?: string;
}

/** packages/images (holds recipes/ and scripts/). */
export const IMAGES_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
/** packages/guest-agent (C sources of the agent baked into every image). */
export const AGENT_DIR = join(IMAGES_DIR, "..", "guest-agent");

const PKG = /^[a-z0-9][a-z0-9+.-]+$/;

export function validateRecipe(r: unknown, origin: string): Recipe {
  const bad = (why: string): never => {
    throw new DenError("invalid_argument", `recipe ${origin}: ${why}`);
  };
  if (!r || typeof r !== "object") bad("not a JSON object");
  const o = r as Record<string, unknown>;
  if (typeof o.name !== "string" || !/^[a-z0-9][a-z0-9._-]{0,62}$/.test(o.name)) bad("name must be lowercase letters, digits, . _ -");
  if (typeof o.suite !== "string" || !/^[a-z]+$/.test(o.suite)) bad("suite must be a Debian suite name");
  if (typeof o.kernelPackage !== "string" || !PKG.test(o.kernelPackage)) bad("kernelPackage must be a Debian package name");
  if (o.from !== undefined && (typeof o.from !== "string" || !/^[a-z0-9][a-z0-9._-]{0,62}$/.test(o.from))) bad("from must be a recipe name");
  if (!Array.isArray(o.packages) || o.packages.some((p) => typeof p !== "string" || !PKG.test(p))) bad("packages must be Debian package names");
  const int = (k: string, lo: number, hi: number) => {
    const v = o[k];
    if (typeof v !== "number" || !Number.isInteger(v) || v < lo || v > hi) bad(`${k} must be an integer in ${lo}..${hi}`);
  };
  int("vcpus", 1, 16);
  int("memoryMb", 128, 65536);
  int("diskMb", 1024, 1024 * 1024);
  if (o.files !== undefined) {
    if (!o.files || typeof o.files !== "object" || Array.isArray(o.files)) bad("files must map guest paths to paths under packages/images");
    for (const [to, from] of Object.entries(o.files as Record<string, unknown>)) {
      if (!/^\/[A-Za-z0-9._/-]+$/.test(to) || to.split("/").includes("..")) bad(`files: ${JSON.stringify(to)} is not an absolute guest path`);
      if (typeof from !== "string" || !/^[A-Za-z0-9._/-]+$/.test(from) || from.startsWith("/") || from.split("/").includes("..")) bad(`files: ${JSON.stringify(from)} must be a path under packages/images`);
    }
  }
  if (o.run !== undefined) {
    const r = o.run as Record<string, unknown> | null;
    if (!r || typeof r !== "object") bad("run must be an object");
    if (typeof r!.startCmd !== "string" || !r!.startCmd) bad("run.startCmd must be a command");
    if (typeof r!.readyCmd !== "string" || !r!.readyCmd) bad("run.readyCmd must be a command");
    const t = r!.readyTimeoutSeconds;
    if (t !== undefined && (typeof t !== "number" || !Number.isInteger(t) || t < 1 || t > 3600)) bad("run.readyTimeoutSeconds must be an integer in 1..3600");
    if (r!.env !== undefined && (typeof r!.env !== "object" || Object.values(r!.env as object).some((v) => typeof v !== "string"))) bad("run.env must map names to strings");
    for (const k of ["workdir", "user"]) if (r![k] !== undefined && typeof r![k] !== "string") bad(`run.${k} must be a string`);
  }
  return o as unknown as Recipe;
}

/** Loads `recipes/<name>.json`, or a recipe file when given a path. */
export function loadRecipe(nameOrPath: string): Recipe {
  const path = nameOrPath.includes("/") || nameOrPath.endsWith(".json") ? nameOrPath : join(IMAGES_DIR, "recipes", `${nameOrPath}.json`);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    throw new DenError("template_not_found", `no recipe ${nameOrPath} (looked for ${path})`);
  }
  try {
    return validateRecipe(JSON.parse(text), path);
  } catch (e) {
    if (e instanceof SyntaxError) throw new DenError("invalid_argument", `recipe ${path} is not valid JSON: ${e.message}`);
    throw e;
  }
}
