/**
 * The tiny shell an in-memory guest's exec runs: a handful of builtins over the guest's
 * file tree (echo, printf, cat, true, false, exit, sleep, mkdir, rm, ls, pwd, cd, test, [,
 * touch, head, chown, chmod, sh -c, bash -c), `$VAR` and `${VAR}` from the exec's env, quotes, `;` `&&`
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
  /** The working directory and environment; `cd` changes the first (a sub-shell has a copy). */
  state: { cwd: string; env: Record<string, string> };
  stdin: ShellInput;
  out(data: Buffer): Promise<void>;
  err(data: Buffer): Promise<void>;
  /** Aborted when the process is killed or times out: a sleep or a read gives up. */
  signal: AbortSignal;
  /** `cmd &`: a background process in the guest (it lives until killed). */
  background(cmd: string): void;
}

const OPS = ["2>&1", ">&2", "&&", "||", ">>", "2>", ";", "&", "|", ">", "<"] as const;
type Op = (typeof OPS)[number];
type Token = { word: string } | { op: Op };
interface Simple { argv: string[]; redirs: Array<[Op, string]> }
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

function tokenize(src: string, env: Record<string, string>): Token[] {
  const out: Token[] = [];
  let word = "";
  let inWord = false;
  const flush = () => {
    if (inWord) out.push({ word });
    word = "";
    inWord = false;
  };
  const variable = (i: number): [string, number] => {
    const m = /^\$\{([A-Za-z_]\w*)\}/.exec(src.slice(i)) ?? /^\$([A-Za-z_]\w*)/.exec(src.slice(i));
    return m ? [env[m[1]!] ?? "", i + m[0].length] : ["$", i + 1];
  };
  let i = 0;
  while (i < src.length) {
    const c = src[i]!;
    if (c === " " || c === "\t") { flush(); i++; continue; }
    if (c === "\n") { flush(); out.push({ op: ";" }); i++; continue; }
    if (c === "#" && !inWord) { while (i < src.length && src[i] !== "\n") i++; continue; }
    const op = OPS.find((o) => src.startsWith(o, i) && !(o.startsWith("2") && inWord));
    if (op) { flush(); out.push({ op }); i += op.length; continue; }
    if (c === "'") {
      const end = src.indexOf("'", i + 1);
      if (end < 0) throw new SyntaxError_("unterminated quoted string");
      word += src.slice(i + 1, end);
      inWord = true;
      i = end + 1;
    } else if (c === '"') {
      inWord = true;
      for (i++; i < src.length && src[i] !== '"';) {
        if (src[i] === "\\" && '"\\$`'.includes(src[i + 1] ?? "x")) { word += src[i + 1]; i += 2; }
        else if (src[i] === "$") { const [v, next] = variable(i); word += v; i = next; }
        else word += src[i++];
      }
      if (i >= src.length) throw new SyntaxError_("unterminated quoted string");
      i++;
    } else if (c === "$") {
      // An unquoted expansion to nothing is no word at all.
      const [v, next] = variable(i);
      word += v;
      inWord ||= v !== "";
      i = next;
    } else {
      word += c === "\\" ? (src[++i] ?? "") : c;
      inWord = true;
      i++;
    }
  }
  flush();
  return out;
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
    } else if (t.op === "2>&1" || t.op === ">&2") cmd.redirs.push([t.op, ""]);
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
    items = parse(tokenize(script, io.state.env));
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
        io.background(item.pipeline.map((c) => c.argv.join(" ")).join(" | "));
        status = 0;
      } else status = await runPipeline(item.pipeline, io);
    }
  } catch (e) {
    if (e instanceof Exit) return e.code;
    throw e;
  }
  return status;
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
  for (const [op, target] of cmd.redirs) {
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
  const status = cmd.argv.length ? await runCommand(cmd.argv, { ...io, stdin, out, err }) : 0;
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

async function subShell(script: string, io: ShellIo): Promise<number> {
  return runScript(script, { ...io, state: { cwd: io.state.cwd, env: { ...io.state.env } } });
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
  sh: shell,
  bash: shell,
};

/** `sh -c SCRIPT`, `sh FILE`, or `sh` reading its script from stdin. */
async function shell(args: string[], io: ShellIo): Promise<number> {
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
