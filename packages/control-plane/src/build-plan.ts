/**
 * A build request (/v1's image or Dockerfile fields) as the host's build spec: a Dockerfile
 * parsed into steps (refused with a 400 naming the instruction and its line before anything
 * runs), its FROM resolved to a template or an image, its COPY steps pointed at the owner's
 * uploaded context. Credentials pass through to the host for this build only.
 */
import { parseDockerfile } from "@den/images";
import { DenError, type api, type host } from "@den/protocol";
import { contextRef } from "./build-contexts.js";
import type { Ctx } from "./context.js";

type Spec = Partial<host.TemplateBuildSpec>;

/** E2B's default base image: Den's `base` is what E2B code expects of it. */
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const E2B_BASE = /^(docker\.io\/)?e2bdev\/base(:[\w][\w.-]*)?$/;

/** `from_image`'s fields (and start, ready, shape, force) as the host's spec. */
export function imageSpec(req: api.CreateTemplateRequest): Spec {
  const out: Spec = {
    ...(req.start_cmd ? { startCmd: req.start_cmd } : {}), ...(req.ready_cmd ? { readyCmd: req.ready_cmd } : {}),
    ...(req.ready_timeout_seconds ? { readyTimeoutSeconds: req.ready_timeout_seconds } : {}),
    ...(req.vcpus ? { vcpus: req.vcpus } : {}), ...(req.memory_mb ? { memoryMb: req.memory_mb } : {}), ...(req.disk_mb ? { diskMb: req.disk_mb } : {}),
    ...(req.force ? { force: true } : {}),
  };
  if (!req.from_image) return out;
  const src = typeof req.from_image === "string" ? { ref: req.from_image } : req.from_image;
  if (E2B_BASE.test(src.ref)) return { ...out, fromTemplate: "base", steps: [] };
  return { ...out, fromImage: { ref: src.ref, ...(src.credentials ? { auth: src.credentials } : {}) } };
}

/**
 * A Dockerfile's plan as the host's spec. FROM names one of the caller's templates (or the
 * host's, such as `base`) if there is one by that name, else an image.
 */
export async function dockerfileSpec(ctx: Ctx, owner: string, req: api.CreateTemplateRequest, isTemplate: (name: string) => Promise<boolean>): Promise<Spec> {
  // ENV PATH=/x:$PATH refers to the base's PATH: the image's is not known here, so the PATH
  // nearly every image sets (and Den's guest agent gives commands) stands for it.
  const plan = parseDockerfile(req.dockerfile!, { ...(req.build_args ? { buildArgs: req.build_args } : {}), base: { env: { PATH: DEFAULT_PATH } } });
  const context = req.context ? await contextRef(ctx, owner, req.context) : undefined;
  const steps = plan.steps.map((s): host.BuildStep => {
    switch (s.type) {
      case "RUN":
        return { type: "RUN", ...(s.argv ? { argv: s.argv } : { cmd: s.cmd! }), ...(Object.keys(s.env).length ? { env: s.env } : {}) };
      case "COPY":
        if (!context) throw new DenError("invalid_argument", `Dockerfile line ${s.line}: COPY needs a build context: upload a tar of it (PUT /v1/templates/contexts/sha256:<digest>) and name it in "context"`, { line: s.line, instruction: "COPY" });
        return { type: "COPY", src: s.src, dest: s.dest, ...(s.chown ? { chown: s.chown } : {}), ...(s.chmod ? { chmod: s.chmod } : {}), ...(s.extract ? { extract: true } : {}), context };
      case "ENV":
        return { type: "ENV", env: s.env };
      case "WORKDIR":
        return { type: "WORKDIR", path: s.path };
      case "USER":
        return { type: "USER", user: s.user };
    }
  });
  const from = E2B_BASE.test(plan.from) || (/^[a-z0-9][a-z0-9_-]*$/.test(plan.from) && (await isTemplate(plan.from)))
    ? { fromTemplate: E2B_BASE.test(plan.from) ? "base" : plan.from }
    : { fromImage: { ref: plan.from } };
  const start = plan.start?.argv.length && !req.start_cmd ? { startArgv: plan.start.argv } : {};
  return { ...imageSpec({ ...req, from_image: undefined }), ...from, steps, ...start };
}

/** What a build is from, as its row keeps it: references and counts, never credentials or file contents. */
export function sourceOf(req: api.CreateTemplateRequest, spec: Spec): Record<string, string> {
  const steps: Record<string, string> = spec.steps?.length ? { steps: String(spec.steps.length) } : {};
  if (req.dockerfile) return { kind: "dockerfile", from: spec.fromImage?.ref ?? spec.fromTemplate ?? "", ...steps, ...(req.context ? { context: req.context } : {}) } as Record<string, string>;
  if (spec.fromImage) return { kind: "image", ref: spec.fromImage.ref, ...steps };
  if (req.from_archive) return { kind: "archive", archive: req.from_archive, ...steps };
  if (req.from_checkpoint) return { kind: "checkpoint", from: req.from_checkpoint, setup: String(spec.setup?.length ?? 0) };
  return { kind: "template", from: spec.fromTemplate ?? "base", setup: String(spec.setup?.length ?? 0), ...steps };
}
