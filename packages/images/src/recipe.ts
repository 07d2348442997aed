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
  /** Extra Debian packages in the root filesystem (on top of minbase). */
  packages: string[];
  vcpus: number;
  memoryMb: number;
  diskMb: number;
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
  if (!Array.isArray(o.packages) || o.packages.some((p) => typeof p !== "string" || !PKG.test(p))) bad("packages must be Debian package names");
  const int = (k: string, lo: number, hi: number) => {
    const v = o[k];
    if (typeof v !== "number" || !Number.isInteger(v) || v < lo || v > hi) bad(`${k} must be an integer in ${lo}..${hi}`);
  };
  int("vcpus", 1, 16);
  int("memoryMb", 128, 65536);
  int("diskMb", 1024, 1024 * 1024);
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
