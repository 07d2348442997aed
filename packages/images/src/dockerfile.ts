/**
 * A Dockerfile parsed into Den's build plan.
 *
 * `dockerfile-ast` splits the text into instructions (line continuations, comments inside
 * them, the escape directive, heredoc bodies); Den joins each instruction's lines, reads its
 * flags and arguments and expands variables the way docker/BuildKit does, and refuses what a
 * single-stage build in a microVM cannot honour. The plan is plain data in a fixed order, so it
 * can be hashed into a build cache key.
 */
import { posix } from "node:path";
import { Copy, DockerfileParser, Run, type Instruction as AstInstruction } from "dockerfile-ast";
import { DenError } from "@den/protocol";
import { expandWord, parseWords, refuse, type Scope, type Where } from "./dockerfile-words.js";

export type PlanStep =
  | {
      type: "RUN";
      cmd?: string;
      argv?: string[];
      /** ARG values in scope: env for this step only, as docker passes build args to RUN. */
      env: Record<string, string>;
      line: number;
    }
  | {
      type: "COPY";
      src: string[];
      dest: string;
      chown?: string;
      chmod?: string;
      /** ADD of a local .tar/.tar.gz/.tgz: unpack it. */
      extract: boolean;
      line: number;
    }
  | { type: "ENV"; env: Record<string, string>; line: number }
  | {
      type: "WORKDIR";
      /** Absolute, resolved against the previous WORKDIR (default "/"). */
      path: string;
      line: number;
    }
  | { type: "USER"; user: string; line: number };

export interface DockerfilePlan {
  /** The FROM reference after ARG substitution (an image reference, or possibly a Den template name: the caller decides). */
  from: string;
  steps: PlanStep[];
  /**
   * From CMD/ENTRYPOINT per docker's rules (exec form ENTRYPOINT + exec CMD concatenated; a
   * shell-form ENTRYPOINT ignores CMD; shell forms become ["/bin/sh","-c",cmd] unless SHELL
   * changed the shell); undefined if neither is set. `argv` is empty after `CMD []` alone.
   */
  start?: { argv: string[] };
  /** Instructions accepted but with no effect in a microVM (EXPOSE, LABEL, ...), and other notices: "line N: EXPOSE has no effect ...". */
  warnings: string[];
}

export interface ParseDockerfileOptions {
  /** `--build-arg`s: override the defaults of declared ARGs; undeclared ones are ignored (with a warning). */
  buildArgs?: Record<string, string>;
  /** Default 1 MiB. */
  maxBytes?: number;
  /** Default 1000. */
  maxInstructions?: number;
  /**
   * The base image's config, when the caller knows it: `ENV PATH=/x:$PATH` and relative
   * WORKDIR/COPY destinations then resolve as docker's would. Without it, the base image's
   * variables are unset here (a warning names each one used) and the working directory starts at "/".
   */
  base?: { env?: Record<string, string>; workdir?: string };
}

const DEFAULT_MAX_BYTES = 1024 * 1024;
const DEFAULT_MAX_INSTRUCTIONS = 1000;
/** Bounds on what variable expansion can build from a bounded text (`ENV A=$A$A` doubles). */
const MAX_PLAN_BYTES = 16 * 1024 * 1024;
const DEFAULT_SHELL = ["/bin/sh", "-c"];

const NO_EFFECT: Record<string, string> = {
  EXPOSE: "a sandbox's ports are reached through Den's port URLs, nothing is published",
  LABEL: "templates carry no image labels",
  MAINTAINER: "templates carry no image metadata",
  STOPSIGNAL: "Den stops a sandbox by stopping its microVM",
  HEALTHCHECK: "use the template's ready command instead",
  VOLUME: "a sandbox's disk is its own; there are no volumes",
};

// ---------------------------------------------------------------------------------------------
// Instructions as read, and refusals naming them

/** One instruction, as Den reads it: its line (1-based), keyword, flags and the text after them. */
interface Instruction {
  line: number;
  keyword: string;
  flags: Map<string, string | null>;
  rest: string;
  ast: AstInstruction;
}

function refuseWhole(why: string, details?: Record<string, unknown>): never {
  throw new DenError("invalid_argument", `Dockerfile ${why}`, details);
}

// ---------------------------------------------------------------------------------------------
// Entry point

export function parseDockerfile(text: string, opts: ParseDockerfileOptions = {}): DockerfilePlan {
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_BYTES;
  const maxInstructions = opts.maxInstructions ?? DEFAULT_MAX_INSTRUCTIONS;
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > maxBytes) refuseWhole(`is ${bytes} bytes, over the limit of ${maxBytes}`, { bytes, maxBytes });
  const buildArgs = checkedStringMap(opts.buildArgs, "build arg");
  const baseEnv = checkedStringMap(opts.base?.env, "base env variable");

  // A BOM and CR line ends are not part of the syntax; lines stay where they were.
  const normalized = text.replace(/^\uFEFF/, "").replace(/\r\n?/g, "\n");
  const ast = DockerfileParser.parse(normalized);
  const escape = escapeCharacter(ast);
  const astInstructions = ast.getInstructions();
  if (astInstructions.length > maxInstructions) {
    refuseWhole(`has ${astInstructions.length} instructions, over the limit of ${maxInstructions}`, {
      instructions: astInstructions.length,
      maxInstructions,
    });
  }

  const state = newState(escape, buildArgs, baseEnv, opts.base?.workdir);
  for (const d of ast.getDirectives()) {
    if (d.getName().toLowerCase() === "syntax") {
      state.warnings.push(`line ${d.getRange().start.line + 1}: the syntax directive is ignored (Den reads the Dockerfile itself)`);
    }
  }
  const lines = normalized.split("\n");
  for (const node of astInstructions) dispatch(state, readInstruction(node, lines, escape));
  return finish(state);
}

function checkedStringMap(map: Record<string, string> | undefined, what: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const [key, value] of Object.entries(map ?? {})) {
    if (typeof value !== "string") refuseWhole(`${what} ${key} must be a string`, { name: key });
    out.set(key, value);
  }
  return out;
}

function escapeCharacter(ast: ReturnType<typeof DockerfileParser.parse>): string {
  for (const d of ast.getDirectives()) {
    if (d.getName().toLowerCase() !== "escape") continue;
    const value = d.getValue();
    if (value !== "\\" && value !== "`") {
      refuse({ line: d.getRange().start.line + 1, keyword: "escape" }, `directive must be \\ or \`, not ${JSON.stringify(value)}`);
    }
  }
  return ast.getEscapeCharacter();
}

// ---------------------------------------------------------------------------------------------
// Reading one instruction: docker's line joining, then its flags

function readInstruction(node: AstInstruction, lines: string[], escape: string): Instruction {
  const range = node.getRange();
  const line = range.start.line + 1;
  const keyword = node.getKeyword();
  const joined = joinLines(lines, range, escape).trim();
  const args = joined.replace(/^\S+\s*/, ""); // drop the keyword as written
  const { flagWords, rest } = extractFlags(args);
  return { line, keyword, flags: parseFlags(flagWords, { line, keyword }), rest: rest.trim(), ast: node };
}

type Range = ReturnType<AstInstruction["getRange"]>;

/**
 * Joins an instruction's lines as docker does: the escape character ending a line (trailing
 * blanks allowed) continues it, the next line's leading blanks are kept, and comment lines
 * and blank lines inside a continuation are dropped.
 */
function joinLines(lines: string[], range: Range, escape: string): string {
  let out = "";
  for (let n = range.start.line; n <= range.end.line; n++) {
    let text = lines[n] ?? "";
    if (n === range.end.line) text = text.slice(0, range.end.character);
    if (n === range.start.line) text = text.slice(range.start.character);
    else if (text.trim() === "" || text.trimStart().startsWith("#")) continue;
    const continued = withoutContinuation(text, escape);
    // A line in the range that does not continue is a heredoc body (refused later): keep it visible.
    out += continued ?? (n < range.end.line ? `${text}\n` : text);
  }
  return out;
}

function withoutContinuation(text: string, escape: string): string | null {
  const trimmed = text.replace(/[ \t]+$/, "");
  return trimmed.endsWith(escape) ? trimmed.slice(0, -1) : null;
}

/** docker's extractBuilderFlags: leading `--words` (quotes and \ honoured) until a word that is not one. */
function extractFlags(line: string): { flagWords: string[]; rest: string } {
  const flagWords: string[] = [];
  let pos = 0;
  for (;;) {
    while (pos < line.length && /\s/.test(line[pos]!)) pos++;
    if (!line.startsWith("--", pos)) return { flagWords, rest: line.slice(pos) };
    let word = "";
    let quote = "";
    for (; pos < line.length; pos++) {
      let ch = line[pos]!;
      if (!quote && /\s/.test(ch)) break;
      if (!quote && (ch === "'" || ch === '"')) {
        quote = ch;
        continue;
      }
      if (quote && ch === quote) {
        quote = "";
        continue;
      }
      if (ch === "\\" && pos + 1 < line.length) ch = line[++pos]!;
      word += ch;
    }
    if (word === "--") return { flagWords, rest: line.slice(pos) };
    flagWords.push(word);
  }
}

function parseFlags(words: string[], at: Where): Map<string, string | null> {
  const flags = new Map<string, string | null>();
  for (const word of words) {
    const eq = word.indexOf("=");
    const name = (eq < 0 ? word.slice(2) : word.slice(2, eq)).toLowerCase();
    if (!name) refuse(at, `has a malformed flag ${JSON.stringify(word)}`);
    if (flags.has(name)) refuse(at, `has --${name} twice`);
    flags.set(name, eq < 0 ? null : word.slice(eq + 1));
  }
  return flags;
}

// ---------------------------------------------------------------------------------------------
// Build state

type CommandForm = { argv: string[] } | { shell: string; shellArgv: string[] };

interface BuildState {
  escape: string;
  buildArgs: Map<string, string>;
  consumedBuildArgs: Set<string>;
  /** ARGs before FROM: usable in FROM only, and as defaults for a bare `ARG X` in the stage. */
  metaArgs: Map<string, string | undefined>;
  from?: string;
  /** ARGs declared in the stage (undefined: declared without a value). */
  stageArgs: Map<string, string | undefined>;
  /** The image env: the base image's, then every ENV so far. */
  env: Map<string, string>;
  workdir: string;
  shell: string[];
  shellChanged: boolean;
  cmd?: { form: CommandForm; line: number };
  entrypoint?: { form: CommandForm; line: number };
  steps: PlanStep[];
  planBytes: number;
  warnings: string[];
}

function newState(escape: string, buildArgs: Map<string, string>, baseEnv: Map<string, string>, baseWorkdir?: string): BuildState {
  return {
    escape,
    buildArgs,
    consumedBuildArgs: new Set(),
    metaArgs: new Map(),
    stageArgs: new Map(),
    env: new Map(baseEnv),
    workdir: baseWorkdir ? posix.resolve("/", baseWorkdir) : "/",
    shell: DEFAULT_SHELL,
    shellChanged: false,
    steps: [],
    planBytes: 0,
    warnings: [],
  };
}

function addStep(state: BuildState, at: Where, step: PlanStep): void {
  state.planBytes += JSON.stringify(step).length;
  if (state.planBytes > MAX_PLAN_BYTES) refuse(at, `makes the build plan larger than ${MAX_PLAN_BYTES} bytes (variables expanding too much?)`);
  state.steps.push(step);
}

function warn(state: BuildState, at: Where, text: string): void {
  const line = `line ${at.line}: ${text}`;
  if (!state.warnings.includes(line)) state.warnings.push(line);
}

// ---------------------------------------------------------------------------------------------
// Instructions

type Handler = (state: BuildState, ins: Instruction) => void;

const HANDLERS: Record<string, Handler> = {
  ARG: handleArg,
  FROM: handleFrom,
  RUN: handleRun,
  COPY: (state, ins) => handleCopy(state, ins, false),
  ADD: (state, ins) => handleCopy(state, ins, true),
  ENV: handleEnv,
  WORKDIR: handleWorkdir,
  USER: handleUser,
  CMD: (state, ins) => {
    state.cmd = { form: commandForm(state, ins), line: ins.line };
  },
  ENTRYPOINT: (state, ins) => {
    state.entrypoint = { form: commandForm(state, ins), line: ins.line };
  },
  SHELL: handleShell,
};

function dispatch(state: BuildState, ins: Instruction): void {
  const { keyword } = ins;
  if (keyword === "ONBUILD") refuse(ins, "is not supported: it sets triggers for images built FROM this one");
  if (!(keyword in HANDLERS) && !(keyword in NO_EFFECT)) refuse(ins, "is not a Dockerfile instruction");
  if (state.from === undefined && keyword !== "ARG" && keyword !== "FROM") refuse(ins, "comes before FROM: only ARG may");
  if (keyword in NO_EFFECT) {
    warn(state, ins, `${keyword} has no effect in a Den template (${NO_EFFECT[keyword]})`);
    return;
  }
  HANDLERS[keyword]!(state, ins);
}

function allowFlags(ins: Instruction, allowed: string[], refusals: Record<string, string> = {}): void {
  for (const name of ins.flags.keys()) {
    if (name in refusals) refuse(ins, `--${name} is not supported: ${refusals[name]}`);
    if (!allowed.includes(name)) refuse(ins, `has an unknown flag --${name}`);
  }
}

function flagValue(ins: Instruction, name: string): string | undefined {
  const value = ins.flags.get(name);
  if (value === null) refuse(ins, `--${name} needs a value (--${name}=...)`);
  return value;
}

function handleFrom(state: BuildState, ins: Instruction): void {
  if (state.from !== undefined) refuse(ins, "starts a second build stage: a Den template is built from exactly one stage");
  allowFlags(ins, [], { platform: "templates are built for the host's platform" });
  const words = ins.rest.split(/\s+/).filter(Boolean);
  const named = words.length === 3 && words[1]!.toLowerCase() === "as";
  if (words.length !== 1 && !named) refuse(ins, "takes an image and an optional AS name");
  const image = expandWord(words[0]!, metaScope(state), ins).trim();
  if (!image) refuse(ins, `names no image once its variables are expanded (${words[0]})`);
  state.from = image;
}

function handleArg(state: BuildState, ins: Instruction): void {
  allowFlags(ins, []);
  const words = parseWords(ins.rest, state.escape);
  if (words.length === 0) refuse(ins, "needs a name (ARG NAME or ARG NAME=default)");
  const inStage = state.from !== undefined;
  // In a stage, every default is expanded against the scope before this ARG (as for ENV).
  const scope = inStage ? stageScope(state) : undefined;
  const declared: [string, string | undefined][] = [];
  for (const word of words) {
    const eq = word.indexOf("=");
    const name = eq < 0 ? word : word.slice(0, eq);
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) refuse(ins, `has an invalid name ${JSON.stringify(name)}`);
    const fallback = eq < 0 ? undefined : expandWord(word.slice(eq + 1), scope ?? metaScope(state), ins);
    declared.push([name, argValue(state, name, fallback, eq >= 0, inStage)]);
    if (!inStage) state.metaArgs.set(name, declared[declared.length - 1]![1]);
  }
  if (inStage) for (const [name, value] of declared) state.stageArgs.set(name, value);
}

/** A --build-arg wins; then the ARG's own default; a bare ARG in the stage inherits the global ARG's value. */
function argValue(state: BuildState, name: string, fallback: string | undefined, hasDefault: boolean, inStage: boolean): string | undefined {
  if (state.buildArgs.has(name)) {
    state.consumedBuildArgs.add(name);
    return state.buildArgs.get(name);
  }
  if (hasDefault) return fallback;
  return inStage ? state.metaArgs.get(name) : undefined;
}

function handleEnv(state: BuildState, ins: Instruction): void {
  allowFlags(ins, []);
  const scope = stageScope(state); // all pairs see the env from before this ENV, as in docker
  const env: Record<string, string> = {};
  for (const [rawName, rawValue] of nameValuePairs(ins, state.escape)) {
    const name = expandWord(rawName, scope, ins);
    if (!name || name.includes("=")) refuse(ins, `has an invalid name ${JSON.stringify(name)}`);
    env[name] = expandWord(rawValue, scope, ins);
  }
  for (const [name, value] of Object.entries(env)) state.env.set(name, value);
  addStep(state, ins, { type: "ENV", env, line: ins.line });
}

/** ENV's two forms: `ENV a=b c="d e"` and the legacy `ENV name the rest of the line`. */
function nameValuePairs(ins: Instruction, escape: string): [string, string][] {
  const words = parseWords(ins.rest, escape);
  if (words.length === 0) refuse(ins, "needs name=value");
  if (!words[0]!.includes("=")) {
    const match = /^(\S+)\s+([\s\S]+)$/.exec(ins.rest);
    if (!match) refuse(ins, `needs a value: ENV ${words[0]}=value`);
    return [[match[1]!, match[2]!]];
  }
  return words.map((word) => {
    const eq = word.indexOf("=");
    if (eq < 0) refuse(ins, `has ${JSON.stringify(word)} without =: write name=value`);
    if (eq === 0) refuse(ins, `has a blank name in ${JSON.stringify(word)}`);
    return [word.slice(0, eq), word.slice(eq + 1)];
  });
}

function handleWorkdir(state: BuildState, ins: Instruction): void {
  allowFlags(ins, []);
  if (!ins.rest) refuse(ins, "needs a path");
  const path = expandWord(ins.rest, stageScope(state), ins);
  if (!path) refuse(ins, `is empty once its variables are expanded (${ins.rest})`);
  state.workdir = absolutePath(state.workdir, path);
  addStep(state, ins, { type: "WORKDIR", path: state.workdir, line: ins.line });
}

function absolutePath(workdir: string, path: string): string {
  return posix.resolve(workdir, path);
}

const USER_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/;

function handleUser(state: BuildState, ins: Instruction): void {
  allowFlags(ins, []);
  if (!ins.rest) refuse(ins, "needs a user (name, uid, or name:group)");
  const user = expandWord(ins.rest, stageScope(state), ins);
  if (!isUserSpec(user)) refuse(ins, `must be a name or uid, optionally :group, not ${JSON.stringify(user)}`);
  addStep(state, ins, { type: "USER", user, line: ins.line });
}

function isUserSpec(spec: string): boolean {
  const parts = spec.split(":");
  return parts.length <= 2 && parts.every((p) => USER_NAME.test(p));
}

function handleRun(state: BuildState, ins: Instruction): void {
  allowFlags(ins, [], {
    mount: "cache, secret and bind mounts need BuildKit; install what the step needs in an earlier step",
    network: "a build step always has the builder's network",
    security: "build steps run unprivileged in the microVM",
  });
  refuseHeredoc(state, ins);
  if (!ins.rest) refuse(ins, "needs a command");
  const argv = jsonArray(ins.rest);
  if (argv && argv.length === 0) refuse(ins, "needs a command: [] is empty");
  const env = runEnv(state);
  if (argv) addStep(state, ins, { type: "RUN", argv, env, line: ins.line });
  else if (state.shellChanged) addStep(state, ins, { type: "RUN", argv: [...state.shell, ins.rest], env, line: ins.line });
  else addStep(state, ins, { type: "RUN", cmd: ins.rest, env, line: ins.line });
}

/** The stage's ARG values, except those an ENV (or the base image's env) overrides: the image env carries those. */
function runEnv(state: BuildState): Record<string, string> {
  const env: Record<string, string> = {};
  const names = [...state.stageArgs.keys()].sort();
  for (const name of names) {
    const value = state.stageArgs.get(name);
    if (value !== undefined && !state.env.has(name)) env[name] = value;
  }
  return env;
}

function handleShell(state: BuildState, ins: Instruction): void {
  allowFlags(ins, []);
  const shell = jsonArray(ins.rest);
  if (!shell || shell.length === 0) refuse(ins, 'must be a JSON array, e.g. SHELL ["/bin/bash", "-o", "pipefail", "-c"]');
  state.shell = shell;
  state.shellChanged = true;
}

function commandForm(state: BuildState, ins: Instruction): CommandForm {
  allowFlags(ins, []);
  if (!ins.rest) refuse(ins, `needs a command (${ins.keyword} ["prog", "arg"] or ${ins.keyword} prog arg)`);
  const argv = jsonArray(ins.rest);
  return argv ? { argv } : { shell: ins.rest, shellArgv: [...state.shell, ins.rest] };
}

const TARBALL = /\.(tar|tar\.gz|tgz)$/i;
const OTHER_ARCHIVE = /\.(tar\.(bz2|xz|zst)|tbz2?|txz)$/i;
const REMOTE_SOURCE = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/|git@)/;

function handleCopy(state: BuildState, ins: Instruction, isAdd: boolean): void {
  const multiStage = "there is only one build stage to copy from";
  if (isAdd) allowFlags(ins, ["chown", "chmod", "link"], { from: multiStage, checksum: "it applies to URLs, which ADD does not fetch", "keep-git-dir": "ADD does not fetch git repositories" });
  else allowFlags(ins, ["chown", "chmod", "link"], { from: multiStage, parents: "not supported by Den", exclude: "use .dockerignore" });
  refuseHeredoc(state, ins);
  const scope = stageScope(state);
  const words = (jsonArray(ins.rest) ?? ins.rest.split(/\s+/).filter(Boolean)).map((w) => expandWord(w, scope, ins));
  if (words.length < 2) refuse(ins, "needs a source and a destination");
  const sources = words.slice(0, -1).map((src) => contextPath(ins, src, isAdd));
  const dest = destination(state, ins, words[words.length - 1]!, sources.length);
  const owner = copyOwnership(ins, scope);
  if (!isAdd) {
    addStep(state, ins, { type: "COPY", src: sources, dest, ...owner, extract: false, line: ins.line });
    return;
  }
  for (const src of sources.filter((s) => OTHER_ARCHIVE.test(s))) {
    warn(state, ins, `ADD copies ${src} without unpacking it (Den unpacks .tar, .tar.gz and .tgz)`);
  }
  // One step per kind: a mixed ADD unpacks its tarballs and copies the rest, as docker's does.
  const tarballs = sources.filter((s) => TARBALL.test(s));
  const others = sources.filter((s) => !TARBALL.test(s));
  if (others.length) addStep(state, ins, { type: "COPY", src: others, dest, ...owner, extract: false, line: ins.line });
  if (tarballs.length) addStep(state, ins, { type: "COPY", src: tarballs, dest, ...owner, extract: true, line: ins.line });
}

/** A source as a normalized path inside the build context ("." for all of it); climbing out is refused. */
function contextPath(ins: Instruction, src: string, isAdd: boolean): string {
  if (REMOTE_SOURCE.test(src)) {
    refuse(ins, isAdd ? `of a URL (${src}) is not supported: download it in a RUN step or put it in the build context` : `cannot copy from a URL (${src})`);
  }
  if (!src) refuse(ins, "has an empty source path");
  // "/x" means the context's x in docker; stripping the slash first makes "/../x" climb like "../x".
  const relative = posix.normalize(src.replace(/^\/+/, "") || ".").replace(/\/+$/, "") || ".";
  if (relative === ".." || relative.startsWith("../")) refuse(ins, `source ${JSON.stringify(src)} is outside the build context`);
  return relative;
}

/** The destination made absolute against WORKDIR, keeping a trailing "/" when it names a directory. */
function destination(state: BuildState, ins: Instruction, dest: string, sourceCount: number): string {
  if (!dest) refuse(ins, "has an empty destination");
  const isDirectory = dest.endsWith("/") || /(^|\/)\.\.?$/.test(dest);
  if (sourceCount > 1 && !isDirectory) refuse(ins, `has several sources, so the destination must be a directory ending in / (${dest}/)`);
  const path = absolutePath(state.workdir, dest);
  return isDirectory && path !== "/" ? `${path}/` : path;
}

function copyOwnership(ins: Instruction, scope: Scope): { chown?: string; chmod?: string } {
  const out: { chown?: string; chmod?: string } = {};
  const chown = flagValue(ins, "chown");
  if (chown !== undefined) {
    out.chown = expandWord(chown, scope, ins);
    if (!isUserSpec(out.chown)) refuse(ins, `--chown must be user[:group] (names or ids), not ${JSON.stringify(out.chown)}`);
  }
  const chmod = flagValue(ins, "chmod");
  if (chmod !== undefined) {
    out.chmod = expandWord(chmod, scope, ins);
    if (!/^[0-7]{3,4}$/.test(out.chmod)) refuse(ins, `--chmod must be octal like 0755, not ${JSON.stringify(out.chmod)}`);
  }
  return out;
}

/** BuildKit reads `<<NAME` (also `<<-NAME`, `<<"NAME"`) in RUN/COPY/ADD as a heredoc; Den does not build those. */
function refuseHeredoc(state: BuildState, ins: Instruction): void {
  if (jsonArray(ins.rest)) return;
  const seenByParser = (ins.ast instanceof Run || ins.ast instanceof Copy) && ins.ast.getHeredocs().length > 0;
  const heredocWord = parseWords(ins.rest, state.escape).some((w) => /^\d*<<-?[^<]/.test(w));
  if (heredocWord || seenByParser) refuse(ins, "with a heredoc (<<EOF) is not supported: put the content in a file in the build context");
}

/** docker's exec form: the text parses as a JSON array of strings; anything else is shell form. */
function jsonArray(text: string): string[] | undefined {
  if (!text.startsWith("[")) return undefined;
  try {
    const value: unknown = JSON.parse(text);
    if (Array.isArray(value) && value.every((v) => typeof v === "string")) return value as string[];
  } catch {
    // shell form, as in docker
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// The result

function finish(state: BuildState): DockerfilePlan {
  if (state.from === undefined) refuseWhole("has no FROM instruction");
  const unused = [...state.buildArgs.keys()].filter((name) => !state.consumedBuildArgs.has(name)).sort();
  if (unused.length) state.warnings.push(`build args not declared by any ARG are ignored: ${unused.join(", ")}`);
  const start = startCommand(state);
  return start ? { from: state.from, steps: state.steps, start, warnings: state.warnings } : { from: state.from, steps: state.steps, warnings: state.warnings };
}

function startCommand(state: BuildState): { argv: string[] } | undefined {
  const { cmd, entrypoint } = state;
  if (entrypoint && "shell" in entrypoint.form) {
    if (cmd) state.warnings.push(`line ${cmd.line}: CMD is ignored because ENTRYPOINT (line ${entrypoint.line}) is in shell form`);
    return { argv: entrypoint.form.shellArgv };
  }
  const tail = cmd ? argvOf(cmd.form) : [];
  if (entrypoint) return { argv: [...argvOf(entrypoint.form), ...tail] };
  return cmd ? { argv: tail } : undefined;
}

function argvOf(form: CommandForm): string[] {
  return "argv" in form ? form.argv : form.shellArgv;
}

// ---------------------------------------------------------------------------------------------
// Which variables an instruction sees (the words themselves: dockerfile-words.ts)

/** FROM (and ARGs before it) see only the ARGs declared before FROM. */
function metaScope(state: BuildState): Scope {
  const args = new Map(state.metaArgs);
  return scopeOf(state, (name) => args.get(name), (name) => args.has(name));
}

/** In the stage the image env wins over ARGs of the same name, as in docker. A snapshot: later changes do not show. */
function stageScope(state: BuildState): Scope {
  const env = new Map(state.env);
  const args = new Map(state.stageArgs);
  return scopeOf(
    state,
    (name) => env.get(name) ?? args.get(name),
    (name) => env.has(name) || args.has(name),
  );
}

function scopeOf(state: BuildState, value: Scope["value"], declared: Scope["declared"]): Scope {
  return {
    escape: state.escape,
    value,
    declared,
    undeclared: (name, at) => warn(state, at, `$${name} is not set here and expands to an empty string`),
  };
}
