/**
 * The tiny shell an in-memory guest's exec runs: a handful of builtins over the guest's
 * file tree (echo, printf, cat, true, false, exit, sleep, mkdir, rm, mv, ls, pwd, cd, test,
 * [, touch, head, chown, chmod, kill, sync, nohup, set -e, sh -c, bash [-l] -c), `$VAR`,
 * `${VAR}`, `$!`, `$?` and `$(...)` (expanded when their command runs), quotes, `;` `&&`
 * `||` `|`, redirections (`>` `>>` `<` `2>` `2>&1` `>&2`) and a trailing `&`. Anything else
 * is "not found", exit 127. Clear, not complete: tests script the rest (`script()`).
 */
import { setTimeout as delay } from "node:timers/promises";
import { DenError } from "@den/protocol";
import { STRERROR, components, type MemoryFs, type Owner } from "./memory-fs.js";

export interface ShellInput {
  read(signal?: AbortSignal): Promise<Buffer | null>;
}

export interface ShellIo {
  fs: MemoryFs;
  /** Who files it makes belong to (the exec's user). */
  owner: Owner;
  /**
   * The working directory and environment (`cd` changes the first; a sub-shell has a copy),
   * the pid of the last `&` job (`$!`), the last status (`$?`) and `set -e`.
   */
  state: { cwd: string; env: Record<string, string>; lastBg?: number; status?: number; errexit?: boolean };
  stdin: ShellInput;
  out(data: Buffer): Promise<void>;
  err(data: Buffer): Promise<void>;
  /** Aborted when the process is killed or times out: a sleep or a read gives up. */
  signal: AbortSignal;
  /** `cmd &`: a background process in the guest (it lives until killed); its pid, for `$!`. */
  background(cmd: string): number | void;
  /** `kill`: sends `signal` to the guest's process `pid` (0: none, only whether it runs); false if there is none. */
  kill?(pid: number, signal: number): boolean;
  /** `pgrep`: the guest's running processes, their pids and command lines. */
  processes?(): Array<{ pid: number; cmdline: string }>;
}

const OPS = ["2>&1", ">&2", "&&", "||", ">>", "2>", ";", "&", "|", ">", "<"] as const;
type Op = (typeof OPS)[number];
/** What a word is made of: text as written, or an expansion done when its command runs (`$X`, `$!`, `$(...)`). */
type Part = { lit: string } | { exp: { v: string } | { sub: string }; quoted: boolean };
type Word = Part[];
type Token = { word: Word } | { op: Op };
interface Simple { argv: Word[]; redirs: Array<[Op, Word]> }
interface Item { pipeline: Simple[]; then: Op }

class SyntaxError_ extends Error {}
class Exit {
  constructor(readonly code: number) {}
}

const CHUNK = 64 * 1024;
const text = (s: string) => Buffer.from(s);
export const bufferInput = (data: Buffer): ShellInput => {
  let left: Buffer | null = data.length ? data : null;
  return { read: async () => { const d = left; left = null; return d; } };
};

/** Where the `$(` whose body starts at `from` closes. */
function closing(src: string, from: number): number {
  let depth = 1;
  for (let i = from; i < src.length; i++) {
    const c = src[i];
    if (c === "\\") i++;
    else if (c === "'") i = src.indexOf("'", i + 1) < 0 ? src.length : src.indexOf("'", i + 1);
    else if (c === '"') {
      while (++i < src.length && src[i] !== '"') if (src[i] === "\\") i++;
    } else if (c === "(") depth++;
    else if (c === ")" && --depth === 0) return i;
  }
  throw new SyntaxError_("unterminated $(");
}

const VARIABLE = /\$(?:\{([A-Za-z_]\w*|[!?])\}|([A-Za-z_]\w*|[!?]))/y;

function tokenize(src: string): Token[] {
  const out: Token[] = [];
  let word: Word = [];
  const lit = (text: string) => {
    const last = word[word.length - 1];
    if (last && "lit" in last) last.lit += text;
    else word.push({ lit: text });
  };
  const flush = () => {
    if (word.length) out.push({ word });
    word = [];
  };
  /** `$...` at `i`: an expansion (or a plain `$`); where the source goes on. */
  const dollar = (i: number, quoted: boolean): number => {
    if (src.startsWith("$(", i)) {
      const end = closing(src, i + 2);
      word.push({ exp: { sub: src.slice(i + 2, end) }, quoted });
      return end + 1;
    }
    VARIABLE.lastIndex = i;
    const m = VARIABLE.exec(src);
    if (!m) {
      lit("$");
      return i + 1;
    }
    word.push({ exp: { v: m[1] ?? m[2]! }, quoted });
    return i + m[0].length;
  };
  let i = 0;
  while (i < src.length) {
    const c = src[i]!;
    if (c === " " || c === "\t") { flush(); i++; continue; }
    if (c === "\n") { flush(); out.push({ op: ";" }); i++; continue; }
    if (c === "#" && !word.length) { while (i < src.length && src[i] !== "\n") i++; continue; }
    const op = OPS.find((o) => src.startsWith(o, i) && !(o.startsWith("2") && word.length));
    if (op) { flush(); out.push({ op }); i += op.length; continue; }
    if (c === "'") {
      const end = src.indexOf("'", i + 1);
      if (end < 0) throw new SyntaxError_("unterminated quoted string");
      lit(src.slice(i + 1, end));
      i = end + 1;
    } else if (c === '"') {
      lit("");
      for (i++; i < src.length && src[i] !== '"';) {
        if (src[i] === "\\" && '"\\$`'.includes(src[i + 1] ?? "x")) { lit(src[i + 1]!); i += 2; }
        else if (src[i] === "$") i = dollar(i, true);
        else lit(src[i++]!);
      }
      if (i >= src.length) throw new SyntaxError_("unterminated quoted string");
      i++;
    } else if (c === "$") {
      i = dollar(i, false);
    } else {
      lit(c === "\\" ? (src[++i] ?? "") : c);
      i++;
    }
  }
  flush();
  return out;
}

/** A word's fields once expanded: an unquoted expansion is split at blanks, and one to nothing is no field. */
async function expandWord(word: Word, io: ShellIo): Promise<string[]> {
  const fields: string[] = [];
  let cur = "";
  let have = false;
  for (const part of word) {
    const text = "lit" in part ? part.lit : await expansion(part.exp, io);
    if ("lit" in part || part.quoted) {
      cur += text;
      have = true;
      continue;
    }
    for (const [i, piece] of text.split(/[ \t\n]+/).entries()) {
      if (i > 0 && have) fields.push(cur);
      if (i > 0) [cur, have] = ["", false];
      if (piece) [cur, have] = [cur + piece, true];
    }
  }
  if (have) fields.push(cur);
  return fields;
}

async function expandWords(words: Word[], io: ShellIo): Promise<string[]> {
  const out: string[] = [];
  for (const w of words) out.push(...(await expandWord(w, io)));
  return out;
}

/** `$X` from the exec's env, `$!`, `$?`, or `$(...)`: what its script writes, trailing newlines dropped. */
async function expansion(e: { v: string } | { sub: string }, io: ShellIo): Promise<string> {
  if ("v" in e) {
    if (e.v === "!") return io.state.lastBg === undefined ? "" : String(io.state.lastBg);
    if (e.v === "?") return String(io.state.status ?? 0);
    return io.state.env[e.v] ?? "";
  }
  const parts: Buffer[] = [];
  await runScript(e.sub, { ...io, state: { ...io.state, env: { ...io.state.env } }, out: async (d) => void parts.push(d) });
  return Buffer.concat(parts).toString().replace(/\n+$/, "");
}

function parse(tokens: Token[]): Item[] {
  const items: Item[] = [];
  let pipeline: Simple[] = [];
  let cmd: Simple = { argv: [], redirs: [] };
  const empty = () => !cmd.argv.length && !cmd.redirs.length;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if ("word" in t) { cmd.argv.push(t.word); continue; }
    if (t.op === ">" || t.op === ">>" || t.op === "<" || t.op === "2>") {
      const target = tokens[++i];
      if (!target || !("word" in target)) throw new SyntaxError_(`a file name after ${t.op}`);
      cmd.redirs.push([t.op, target.word]);
    } else if (t.op === "2>&1" || t.op === ">&2") cmd.redirs.push([t.op, []]);
    else if (empty() && !pipeline.length && t.op === ";") continue;
    else if (empty()) throw new SyntaxError_(`"${t.op}" unexpected`);
    else {
      pipeline.push(cmd);
      cmd = { argv: [], redirs: [] };
      if (t.op === "|") continue;
      items.push({ pipeline, then: t.op });
      pipeline = [];
    }
  }
  if (!empty()) pipeline.push(cmd);
  else if (pipeline.length) throw new SyntaxError_("a command after |");
  if (pipeline.length) items.push({ pipeline, then: ";" });
  return items;
}

/** Runs a shell script; its exit status. */
export async function runScript(script: string, io: ShellIo): Promise<number> {
  let items: Item[];
  try {
    items = parse(tokenize(script));
  } catch (e) {
    if (!(e instanceof SyntaxError_)) throw e;
    await io.err(text(`sh: syntax error: ${e.message}\n`));
    return 2;
  }
  let status = 0;
  let prev: Op = ";";
  try {
    for (const item of items) {
      const skip = (prev === "&&" && status !== 0) || (prev === "||" && status === 0);
      prev = item.then;
      if (skip) continue;
      if (item.then === "&") {
        status = await background(item.pipeline, io);
      } else {
        status = await runPipeline(item.pipeline, io);
        // `set -e`: a command that fails ends the script, unless a && or || after it tests it.
        if (status !== 0 && io.state.errexit && item.then !== "&&" && item.then !== "||") throw new Exit(status);
      }
      io.state.status = status;
    }
  } catch (e) {
    if (e instanceof Exit) return e.code;
    throw e;
  }
  return status;
}

/**
 * `cmd &`: a process of the guest that lives until it is killed (what it would write goes
 * nowhere, but the files it redirects to are made); `$!` is its pid.
 */
async function background(cmds: Simple[], io: ShellIo): Promise<number> {
  const label: string[] = [];
  for (const c of cmds) {
    label.push((await expandWords(c.argv, io)).join(" "));
    for (const [op, target] of c.redirs) {
      if (op !== ">" && op !== ">>" && op !== "2>") continue;
      const path = abs(io, (await expandWord(target, io)).join(" "));
      if (path === "/dev/null") continue;
      try {
        io.fs.write(path, Buffer.alloc(0), { append: op === ">>", owner: io.owner });
      } catch (e) {
        return fail(io, `sh: cannot create ${path}: ${why(e)}`, 2);
      }
    }
  }
  const pid = io.background(label.join(" | "));
  io.state.lastBg = typeof pid === "number" ? pid : undefined;
  return 0;
}

/** Runs a program by argv (no shell), as the guest agent's exec of an argv does. */
export function runArgv(argv: string[], io: ShellIo): Promise<number> {
  return runCommand(argv, io);
}

/** Whether argv[0] names a program the guest has (an argv exec of another is `not_found`). */
export function knownProgram(name: string): boolean {
  return Object.hasOwn(BUILTINS, name.slice(name.lastIndexOf("/") + 1));
}

async function runPipeline(cmds: Simple[], io: ShellIo): Promise<number> {
  if (cmds.length === 1) return runSimple(cmds[0]!, io);
  // Each stage runs to its end, its output the next one's input (a sub-shell each).
  let input = io.stdin;
  let status = 0;
  for (const [i, cmd] of cmds.entries()) {
    const parts: Buffer[] = [];
    const out = i === cmds.length - 1 ? io.out : async (d: Buffer) => void parts.push(d);
    status = await runSimple(cmd, { ...io, state: { ...io.state }, stdin: input, out });
    input = bufferInput(Buffer.concat(parts));
  }
  return status;
}

async function runSimple(cmd: Simple, io: ShellIo): Promise<number> {
  let { stdin, out, err } = io;
  const files: Array<{ path: string; name: string; append: boolean; parts: Buffer[] }> = [];
  const argv = await expandWords(cmd.argv, io);
  for (const [op, word] of cmd.redirs) {
    const target = (await expandWord(word, io)).join(" ");
    if (op === "2>&1") err = out;
    else if (op === ">&2") out = err;
    else if (op === "<") {
      try {
        stdin = bufferInput(io.fs.read(abs(io, target)));
      } catch (e) {
        return fail(io, `sh: cannot open ${target}: ${why(e)}`, 1);
      }
    } else {
      const f = { path: abs(io, target), name: target, append: op === ">>", parts: [] as Buffer[] };
      const sink = f.path === "/dev/null" ? async () => undefined : async (d: Buffer) => void f.parts.push(d);
      if (f.path !== "/dev/null") files.push(f);
      if (op === "2>") err = sink;
      else out = sink;
    }
  }
  const status = argv.length ? await runCommand(argv, { ...io, stdin, out, err }) : 0;
  for (const f of files) {
    try {
      io.fs.write(f.path, Buffer.concat(f.parts), { append: f.append, owner: io.owner });
    } catch (e) {
      return fail(io, `sh: cannot create ${f.name}: ${why(e)}`, 2);
    }
  }
  return status;
}

async function runCommand(argv: string[], io: ShellIo): Promise<number> {
  const name = argv[0]!.slice(argv[0]!.lastIndexOf("/") + 1);
  const builtin = Object.hasOwn(BUILTINS, name) ? BUILTINS[name] : undefined;
  if (!builtin) return fail(io, `sh: ${argv[0]}: not found`, 127);
  return builtin(argv.slice(1), io);
}

function abs(io: ShellIo, p: string): string {
  return p.startsWith("/") ? p : `${io.state.cwd}/${p}`;
}

function why(e: unknown): string {
  return e instanceof DenError ? (STRERROR[e.code] ?? e.message) : String(e);
}

async function fail(io: ShellIo, message: string, status: number): Promise<number> {
  await io.err(text(message + "\n"));
  return status;
}

type Builtin = (args: string[], io: ShellIo) => Promise<number>;

/** `each` runs `fn` on every argument; the status is 1 if any failed. */
async function each(args: string[], io: ShellIo, fn: (a: string) => void | Promise<void>, message: (a: string, e: unknown) => string): Promise<number> {
  let status = 0;
  for (const a of args) {
    try {
      await fn(a);
    } catch (e) {
      status = await fail(io, message(a, e), 1);
    }
  }
  return status;
}

function test(a: string[], io: ShellIo): boolean {
  if (a[0] === "!") return !test(a.slice(1), io);
  if (a.length <= 1) return (a[0] ?? "") !== "";
  const node = () => io.fs.find(abs(io, a[1]!));
  if (a.length === 2) {
    if (a[0] === "-f") return node()?.type === "file";
    if (a[0] === "-d") return node()?.type === "dir";
    if (a[0] === "-e") return node() !== undefined;
    if (a[0] === "-n") return a[1] !== "";
    if (a[0] === "-z") return a[1] === "";
  }
  if (a.length === 3 && (a[1] === "=" || a[1] === "==")) return a[0] === a[2];
  if (a.length === 3 && a[1] === "!=") return a[0] !== a[2];
  return false;
}

async function readAll(input: ShellInput, signal: AbortSignal): Promise<Buffer> {
  const parts: Buffer[] = [];
  for (let c; (c = await input.read(signal));) parts.push(c);
  return Buffer.concat(parts);
}

/** A new shell (`sh -c`): the same directory and environment, no jobs, no `set -e`. */
async function subShell(script: string, io: ShellIo): Promise<number> {
  return runScript(script, { ...io, state: { cwd: io.state.cwd, env: { ...io.state.env } } });
}

/** The signals `kill` knows by name. */
const SIGNALS: Record<string, number> = { HUP: 1, INT: 2, QUIT: 3, KILL: 9, USR1: 10, USR2: 12, PIPE: 13, ALRM: 14, TERM: 15, CONT: 18, STOP: 19, TSTP: 20 };

function signalNumber(spec: string): number | undefined {
  if (/^\d+$/.test(spec)) return Number(spec) <= 64 ? Number(spec) : undefined;
  return SIGNALS[spec.toUpperCase().replace(/^SIG/, "")];
}

const BUILTINS: Record<string, Builtin> = {
  true: async () => 0,
  false: async () => 1,
  ":": async () => 0,
  async echo(args, io) {
    const newline = args[0] !== "-n";
    await io.out(text(args.slice(newline ? 0 : 1).join(" ") + (newline ? "\n" : "")));
    return 0;
  },
  async printf(args, io) {
    if (!args.length) return fail(io, "printf: usage: printf format [arguments]", 2);
    const rest = args.slice(1);
    const escapes: Record<string, string> = { "%%": "%", "\\n": "\n", "\\t": "\t", "\\\\": "\\" };
    await io.out(text(args[0]!.replace(/%%|%s|\\n|\\t|\\\\/g, (m) => (m === "%s" ? (rest.shift() ?? "") : escapes[m]!))));
    return 0;
  },
  async cat(args, io) {
    return each(args.length ? args : ["-"], io, async (a) => {
      if (a === "-") {
        for (let c; (c = await io.stdin.read(io.signal));) await io.out(c);
        return;
      }
      const data = io.fs.read(abs(io, a));
      for (let o = 0; o < data.length; o += CHUNK) await io.out(data.subarray(o, o + CHUNK));
    }, (a, e) => `cat: ${a}: ${why(e)}`);
  },
  async head(args, io) {
    const m = /^-([cn])$/.exec(args[0] ?? "");
    const n = Number(args[1]);
    if (!m || !Number.isInteger(n) || n < 0) return fail(io, "head: usage: head -c N [FILE] | head -n N [FILE]", 1);
    let data: Buffer;
    try {
      data = args[2] ? io.fs.read(abs(io, args[2])) : await readAll(io.stdin, io.signal);
    } catch (e) {
      return fail(io, `head: cannot open '${args[2]}' for reading: ${why(e)}`, 1);
    }
    if (m[1] === "c") await io.out(data.subarray(0, n));
    else await io.out(text(data.toString().split(/(?<=\n)/).slice(0, n).join("")));
    return 0;
  },
  async exit(args) {
    const code = Number(args[0] ?? 0);
    throw new Exit(Number.isInteger(code) ? code & 255 : 2);
  },
  async sleep(args, io) {
    const s = Number((args[0] ?? "").replace(/s$/, ""));
    if (!args.length || !Number.isFinite(s) || s < 0) return fail(io, `sleep: invalid time interval '${args[0] ?? ""}'`, 1);
    await delay(s * 1000, undefined, { signal: io.signal });
    return 0;
  },
  async mkdir(args, io) {
    const parents = args.includes("-p");
    return each(args.filter((a) => a !== "-p"), io, (a) => io.fs.mkdir(abs(io, a), { parents, owner: io.owner }), (a, e) => `mkdir: cannot create directory '${a}': ${why(e)}`);
  },
  async rm(args, io) {
    const flags = args.filter((a) => /^-[rRf]+$/.test(a)).join("");
    const recursive = /[rR]/.test(flags);
    return each(args.filter((a) => !/^-[rRf]+$/.test(a)), io, (a) => {
      const n = io.fs.find(abs(io, a));
      if (!n && flags.includes("f")) return;
      if (n?.type === "dir" && !recursive) throw new DenError("is_a_directory", a);
      io.fs.remove(abs(io, a), { recursive: true });
    }, (a, e) => `rm: cannot remove '${a}': ${why(e)}`);
  },
  async ls(args, io) {
    const paths = args.filter((a) => !a.startsWith("-"));
    let status = 0;
    for (const a of paths.length ? paths : ["."]) {
      const n = io.fs.find(abs(io, a));
      if (!n) status = await fail(io, `ls: cannot access '${a}': No such file or directory`, 2);
      else if (n.type === "file") await io.out(text(a + "\n"));
      else {
        const names = io.fs.list(abs(io, a)).entries.map((e) => e.name).sort();
        if (names.length) await io.out(text(names.join("\n") + "\n"));
      }
    }
    return status;
  },
  async pwd(_args, io) {
    await io.out(text(io.state.cwd + "\n"));
    return 0;
  },
  async cd(args, io) {
    const target = args[0] ?? io.state.env.HOME ?? "/";
    if (io.fs.find(abs(io, target))?.type !== "dir") return fail(io, `sh: cd: can't cd to ${target}`, 2);
    io.state.cwd = "/" + components(abs(io, target)).join("/");
    return 0;
  },
  test: async (args, io) => (test(args, io) ? 0 : 1),
  async "["(args, io) {
    if (args[args.length - 1] !== "]") return fail(io, "sh: [: missing ]", 2);
    return test(args.slice(0, -1), io) ? 0 : 1;
  },
  async touch(args, io) {
    return each(args, io, (a) => io.fs.touch(abs(io, a), io.owner), (a, e) => `touch: cannot touch '${a}': ${why(e)}`);
  },
  // What the control plane runs in a volume's helper VM (volume-files.ts): numeric owners, octal modes.
  async chown(args, io) {
    const [owner, ...paths] = args.filter((a) => a !== "-h" && a !== "--" && a !== "-R");
    const m = /^(\d*)(?::(\d*))?$/.exec(owner ?? "");
    if (!m || !paths.length) return fail(io, `chown: invalid user: '${owner ?? ""}'`, 1);
    const ids = { ...(m[1] ? { uid: Number(m[1]) } : {}), ...(m[2] ? { gid: Number(m[2]) } : {}) };
    return each(paths, io, (a) => io.fs.setMeta(abs(io, a), ids), (a, e) => `chown: cannot access '${a}': ${why(e)}`);
  },
  async chmod(args, io) {
    const [mode, ...paths] = args.filter((a) => a !== "--" && a !== "-R");
    if (!/^[0-7]{1,4}$/.test(mode ?? "") || !paths.length) return fail(io, `chmod: invalid mode: '${mode ?? ""}'`, 1);
    return each(paths, io, (a) => io.fs.setMeta(abs(io, a), { mode: parseInt(mode!, 8) }), (a, e) => `chmod: cannot access '${a}': ${why(e)}`);
  },
  async mv(args, io) {
    const paths = args.filter((a) => !/^-[fnv]+$/.test(a) && a !== "--");
    if (paths.length < 2) return fail(io, `mv: missing ${paths.length ? "destination file" : "file"} operand`, 1);
    const dest = paths.pop()!;
    const into = io.fs.find(abs(io, dest))?.type === "dir";
    if (paths.length > 1 && !into) return fail(io, `mv: target '${dest}' is not a directory`, 1);
    let status = 0;
    for (const a of paths) {
      if (!io.fs.find(abs(io, a))) {
        status = await fail(io, `mv: cannot stat '${a}': No such file or directory`, 1);
        continue;
      }
      try {
        io.fs.rename(abs(io, a), into ? `${abs(io, dest)}/${components(abs(io, a)).pop()}` : abs(io, dest));
      } catch (e) {
        status = await fail(io, `mv: cannot move '${a}' to '${dest}': ${why(e)}`, 1);
      }
    }
    return status;
  },
  // `kill [-N|-NAME|-s NAME] PID...`; `kill -0 PID`: whether it runs.
  async kill(args, io) {
    let rest = args;
    let spec = "TERM";
    if (rest[0] === "-s" || rest[0] === "-n") [spec, rest] = [rest[1] ?? "", rest.slice(2)];
    else if (rest[0]?.startsWith("-") && rest[0] !== "--") [spec, rest] = [rest[0].slice(1), rest.slice(1)];
    if (rest[0] === "--") rest = rest.slice(1);
    const signal = signalNumber(spec);
    if (signal === undefined) return fail(io, `sh: kill: ${spec}: invalid signal specification`, 1);
    if (!rest.length) return fail(io, "kill: usage: kill [-s sigspec | -n signum | -sigspec] pid ...", 2);
    return each(rest, io, (a) => {
      if (!/^\d+$/.test(a)) throw new Error(`${a}: arguments must be process or job IDs`);
      if (!io.kill?.(Number(a), signal)) throw new Error(`(${a}) - No such process`);
    }, (_a, e) => `sh: kill: ${(e as Error).message}`);
  },
  // pgrep [-c] [-x] [-f] PATTERN: by name (a command line's first word's base name), or its whole line with -f.
  async pgrep(args, io) {
    const flags = new Set(args.filter((a) => /^-[cxf]+$/.test(a)).join("").replace(/-/g, ""));
    const pattern = args.find((a) => !/^-[cxf]+$/.test(a));
    if (pattern === undefined) return fail(io, "pgrep: no matching criteria specified", 2);
    let re: RegExp;
    try {
      re = new RegExp(flags.has("x") ? `^(?:${pattern})$` : pattern);
    } catch {
      return fail(io, `pgrep: invalid pattern: ${pattern}`, 2);
    }
    const hits = (io.processes?.() ?? []).filter((p) => re.test(flags.has("f") ? p.cmdline : (p.cmdline.split(/\s+/)[0] ?? "").replace(/^.*\//, "")));
    await io.out(text(flags.has("c") ? `${hits.length}\n` : hits.map((p) => `${p.pid}\n`).join("")));
    return hits.length ? 0 : 1;
  },
  sync: async () => 0,
  // What it runs goes on after a hangup: here, it just runs.
  async nohup(args, io) {
    return args.length ? runCommand(args, io) : fail(io, "nohup: missing operand", 125);
  },
  // `set -e` (and `set -o errexit`) is honoured, `+e` undoes it; other options are taken and ignored.
  async set(args, io) {
    for (const [i, a] of args.entries()) {
      if (/^[-+][A-Za-z]*e/.test(a)) io.state.errexit = a[0] === "-";
      if ((a === "-o" || a === "+o") && args[i + 1] === "errexit") io.state.errexit = a === "-o";
    }
    return 0;
  },
  sh: shell,
  bash: shell,
};

/** `sh -c SCRIPT`, `sh FILE`, or `sh` reading its script from stdin; `-l` (a login shell, as E2B's envd starts commands) changes nothing here. */
async function shell(args: string[], io: ShellIo): Promise<number> {
  while (args[0] === "-l" || args[0] === "--login") args = args.slice(1);
  if (args[0] === "-c") return args[1] === undefined ? fail(io, "sh: -c requires an argument", 2) : subShell(args[1], io);
  let script: string;
  try {
    script = args[0] === undefined ? (await readAll(io.stdin, io.signal)).toString() : io.fs.read(abs(io, args[0])).toString();
  } catch (e) {
    if (!(e instanceof DenError && STRERROR[e.code])) throw e;
    return fail(io, `sh: cannot open ${args[0]}: ${why(e)}`, 2);
  }
  return subShell(script, io);
}
