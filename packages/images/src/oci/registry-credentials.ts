/**
 * Registry credentials of the deployment (DEN_REGISTRY_AUTH_FILE): a Docker-style config
 * (`{"auths": {"registry.example:5000": {"auth": base64("user:pass")}}}`, as `docker login`,
 * `podman login` and `skopeo login` write it; `username`/`password` or `registrytoken` also
 * taken), read at each build so a rotated secret applies without a restart. A build's own
 * credentials win over these. The file is a secret: its values never reach a log or an error.
 */
import { readFile, stat } from "node:fs/promises";
import { z } from "zod";
import { DenError } from "@den/protocol";
import { DOCKER_HUB, normalizeRegistryHost } from "./reference.js";
import type { RegistryAuth } from "./registry-auth.js";

const MAX_FILE_BYTES = 1024 * 1024;

const Entry = z.object({
  auth: z.string().max(16 * 1024).optional(),
  username: z.string().max(1024).optional(),
  password: z.string().max(16 * 1024).optional(),
  registrytoken: z.string().max(16 * 1024).optional(),
  identitytoken: z.string().max(16 * 1024).optional(),
});
const AuthFile = z.object({ auths: z.record(z.string().max(1024), Entry) });

/** The registry a key of `auths` names: `https://index.docker.io/v1/` is Docker Hub; a scheme and path are dropped. */
function keyRegistry(key: string): string {
  const host = key.replace(/^[a-z]+:\/\//i, "").split("/")[0]!.toLowerCase();
  return host === "index.docker.io" || host === "registry-1.docker.io" ? DOCKER_HUB : normalizeRegistryHost(host) ?? host;
}

function entryAuth(e: z.infer<typeof Entry>): RegistryAuth | undefined {
  if (e.registrytoken) return { token: e.registrytoken };
  if (e.username && e.password) return { username: e.username, password: e.password };
  if (e.auth) {
    const plain = Buffer.from(e.auth, "base64").toString("utf8");
    const i = plain.indexOf(":");
    if (i > 0) return { username: plain.slice(0, i), password: plain.slice(i + 1) };
  }
  return undefined;
}

/** The deployment's credentials for `registry` (as `parseImageRef` names it), if the file has any. */
export async function deploymentAuth(registry: string, env: NodeJS.ProcessEnv = process.env): Promise<RegistryAuth | undefined> {
  const path = env.DEN_REGISTRY_AUTH_FILE?.trim();
  if (!path) return undefined;
  const st = await stat(path).catch(() => undefined);
  if (!st?.isFile()) throw new DenError("image_pull_failed", `DEN_REGISTRY_AUTH_FILE (${path}) is not a readable file`);
  if (st.size > MAX_FILE_BYTES) throw new DenError("image_pull_failed", `DEN_REGISTRY_AUTH_FILE is larger than ${MAX_FILE_BYTES} bytes`);
  let parsed: z.infer<typeof AuthFile>;
  try {
    parsed = AuthFile.parse(JSON.parse(await readFile(path, "utf8")));
  } catch {
    // (Not the parser's message: it could quote the secret.)
    throw new DenError("image_pull_failed", `DEN_REGISTRY_AUTH_FILE (${path}) is not a Docker-style auth file ({"auths": {...}})`);
  }
  const want = normalizeRegistryHost(registry) ?? registry;
  for (const [key, entry] of Object.entries(parsed.auths)) if (keyRegistry(key) === want) return entryAuth(entry);
  return undefined;
}
