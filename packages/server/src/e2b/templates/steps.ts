/**
 * E2B's build start (`POST /v2/templates/{id}/builds/{buildID}`) as a Den build plan: the
 * source (an image, E2B's `e2bdev/base` = Den's `base`, or a template), the builder's steps one
 * for one as Den's, the start and ready commands. Everything is checked before the build
 * starts: a step Den does not build, a COPY whose files were not uploaded, a registry type
 * other than a login, a shape a template source cannot have, each a 400 naming it. Registry
 * credentials go into the plan for this pull only, never into `source`.
 */
import { DenError, api, type e2bTemplates, type host } from "@den/protocol";
import { imageSpec } from "@den/control-plane";
import { portableReadyCmd } from "./ready.js";

type Step = host.BuildStep;
type Plan = Partial<host.TemplateBuildSpec>;
type Start = e2bTemplates.TemplateBuildStartV2;

/**
 * E2B's defaults for a build from an image or from its base: steps run as `user` in
 * `/home/user`, and so do the template's sandboxes unless a step changes them. A template
 * source keeps its own.
 */
const E2B_DEFAULTS: Step[] = [{ type: "USER", user: "user" }, { type: "WORKDIR", path: "/home/user" }];

const USER = /^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}$/;
const OWNER = /^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}(:[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63})?$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,255}$/;
const MAX_PATH = 4096;

/** A template a build may start from, as Den names it (`name` or `name@version`), with its default user and its shape. */
export interface SourceTemplate {
  spec: string;
  user: string | null;
  vcpus: number;
  memoryMb: number;
}

export interface PlanDeps {
  /** Where the owner's files of a COPY are (by E2B's files hash); undefined: not uploaded. */
  context(hash: string): Promise<{ key: string; sha256: string } | undefined>;
  /** A template (`name`, `name:tag`) the caller may build from; undefined: none. */
  template(ref: string): Promise<SourceTemplate | undefined>;
}

export interface PlannedBuild {
  plan: Plan;
  /** What the build's row keeps: where from, how many steps, and how many Den put before E2B's (to number E2B's steps in errors). */
  source: Record<string, string>;
}

const bad = (message: string) => new DenError("invalid_argument", message);

/** E2B's build start, checked, as a Den plan; `shape` is the build's cpuCount and memoryMB (from POST /v3/templates). */
export async function planBuild(b: Start, shape: { vcpus?: number; memoryMb?: number }, deps: PlanDeps): Promise<PlannedBuild> {
  if ((b.fromImage === undefined) === (b.fromTemplate === undefined)) throw bad("give exactly one of fromImage and fromTemplate");
  const { plan, source, user, defaults } = await planSource(b, deps);
  if (plan.fromTemplate) {
    // A template's sandboxes restore its snapshot: their shape is its source's, fixed.
    const t = (await deps.template(plan.fromTemplate))!;
    if ((shape.vcpus !== undefined && shape.vcpus !== t.vcpus) || (shape.memoryMb !== undefined && shape.memoryMb !== t.memoryMb)) {
      throw bad(`cpuCount/memoryMB: a template built from template ${t.spec} has its shape (${t.vcpus} vCPU, ${t.memoryMb} MiB); build from an image (fromImage) to choose another`);
    }
  } else {
    if (shape.vcpus !== undefined) plan.vcpus = shape.vcpus;
    if (shape.memoryMb !== undefined) plan.memoryMb = shape.memoryMb;
  }
  const prefix = defaults ? E2B_DEFAULTS : [];
  const steps: Step[] = [...prefix];
  let current = defaults ? "user" : user;
  for (const [i, s] of (b.steps ?? []).entries()) {
    const step = await mapStep(s, i + 1, current, deps);
    if (step.type === "USER") current = step.user;
    steps.push(step);
  }
  return {
    plan: {
      ...plan, steps,
      ...(b.startCmd ? { startCmd: b.startCmd } : {}), ...(b.readyCmd ? { readyCmd: portableReadyCmd(b.readyCmd) } : {}), ...(b.force ? { force: true } : {}),
    },
    source: { ...source, steps: String(b.steps?.length ?? 0), step_offset: String(prefix.length) },
  };
}

async function planSource(b: Start, deps: PlanDeps): Promise<{ plan: Plan; source: Record<string, string>; user: string | null; defaults: boolean }> {
  if (b.fromImage !== undefined) {
    const ref = api.ImageRef.safeParse(b.fromImage);
    if (!ref.success) throw bad(`fromImage ${JSON.stringify(b.fromImage.slice(0, 80))}: an image reference is [registry/]repository[:tag][@sha256:digest]`);
    const credentials = registryLogin(b.fromImageRegistry);
    // (imageSpec maps E2B's base image to Den's `base` template, as /v1 does.)
    const { fromImage, fromTemplate } = imageSpec({ name: "e2b", from_image: { ref: ref.data, ...(credentials ? { credentials } : {}) } });
    if (fromTemplate) return { plan: { fromTemplate }, source: { kind: "e2b", template: fromTemplate, image: ref.data }, user: null, defaults: true };
    return { plan: { fromImage: fromImage! }, source: { kind: "e2b", image: ref.data }, user: null, defaults: true };
  }
  if (b.fromImageRegistry) throw bad("fromImageRegistry goes with fromImage");
  const t = await deps.template(b.fromTemplate!);
  if (!t) throw new DenError("template_not_found", `fromTemplate ${JSON.stringify(b.fromTemplate!.slice(0, 80))}: no such template`);
  // Den's `base` is E2B's base: E2B's defaults apply to it as to an image.
  return { plan: { fromTemplate: t.spec }, source: { kind: "e2b", template: t.spec }, user: t.user, defaults: t.spec === "base" };
}

/** E2B's `registry` login is Den's basic auth; cloud registries' own credentials are not. */
function registryLogin(r: e2bTemplates.FromImageRegistry | undefined): { username: string; password: string } | undefined {
  if (!r) return undefined;
  if (r.type !== "registry") {
    throw bad(`fromImageRegistry: ${JSON.stringify(r.type)} registries are not supported: Den pulls anonymously or with a username and password (Template().fromImage(image, {username, password}))`);
  }
  if (!r.username || !r.password) throw bad("fromImageRegistry: a registry login needs username and password");
  return { username: r.username, password: r.password };
}

/** One of E2B's steps (number `n`, from 1) as Den's; `user` is who the steps before it left running them (null: root or unknown). */
async function mapStep(s: e2bTemplates.TemplateStep, n: number, user: string | null, deps: PlanDeps): Promise<Step> {
  const args = s.args ?? [];
  const force = s.force ? { force: true } : {};
  const take = (max: number, usage: string): string[] => {
    if (args.length > max) throw bad(`step ${n}: ${usage}`);
    return args;
  };
  const path = (p: string) => {
    if (p.length > MAX_PATH) throw bad(`step ${n}: a path is at most ${MAX_PATH} characters`);
    return p;
  };
  switch (s.type) {
    case "RUN": {
      const [cmd, runAs] = take(2, "RUN takes [command, user?]");
      if (!cmd?.trim()) throw bad(`step ${n}: RUN has no command`);
      return { type: "RUN", cmd, ...(runAs ? { user: checkUser(runAs, n) } : {}), ...force };
    }
    case "COPY": {
      const [src, dest, owner, mode] = take(4, "COPY takes [src, dest, user?, mode?]");
      if (!src || !dest) throw bad(`step ${n}: COPY takes [src, dest, user?, mode?]`);
      if (mode && !/^[0-7]{3,4}$/.test(mode)) throw bad(`step ${n}: COPY mode ${JSON.stringify(mode.slice(0, 16))} is not octal (e.g. 0755)`);
      if (!s.filesHash) throw bad(`step ${n}: COPY ${src} has no filesHash`);
      const context = await deps.context(s.filesHash);
      if (!context) throw bad(`step ${n}: the files of COPY ${src} (${s.filesHash.slice(0, 12)}) were not uploaded: GET /templates/{templateID}/files/{hash} gives the link`);
      // Files belong to whoever the steps run as, unless the step names an owner.
      const chown = owner || (user && user !== "root" ? user : undefined);
      if (chown && !OWNER.test(chown)) throw bad(`step ${n}: COPY user ${JSON.stringify(chown.slice(0, 64))} is not a user[:group]`);
      return { type: "COPY", src: [path(src)], dest: path(dest), ...(chown ? { chown } : {}), ...(mode ? { chmod: mode } : {}), context, ...force };
    }
    case "ENV": {
      if (!args.length || args.length % 2 || args.length > 512) throw bad(`step ${n}: ENV takes [name, value, name, value, ...]`);
      const env: Record<string, string> = {};
      for (let i = 0; i < args.length; i += 2) {
        if (!ENV_NAME.test(args[i]!)) throw bad(`step ${n}: ENV name ${JSON.stringify(args[i]!.slice(0, 64))} is not a variable name`);
        env[args[i]!] = args[i + 1]!;
      }
      return { type: "ENV", env };
    }
    case "WORKDIR": {
      const [dir] = take(1, "WORKDIR takes [path]");
      if (!dir) throw bad(`step ${n}: WORKDIR takes [path]`);
      return { type: "WORKDIR", path: path(dir) };
    }
    case "USER": {
      const [name] = take(1, "USER takes [user]");
      if (!name) throw bad(`step ${n}: USER takes [user]`);
      return { type: "USER", user: checkUser(name, n) };
    }
    default:
      throw bad(`step ${n}: ${JSON.stringify(s.type)} is not a step Den builds (RUN, COPY, ENV, WORKDIR, USER)`);
  }
}

function checkUser(user: string, n: number): string {
  if (!USER.test(user)) throw bad(`step ${n}: user ${JSON.stringify(user.slice(0, 64))} is not a user name`);
  return user;
}
