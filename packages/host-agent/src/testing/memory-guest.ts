/**
 * The guest of one in-memory sandbox (a `HostGuest`): its file tree, its process table,
 * execs run by the mini shell (or answered by a test's script), spawned processes with
 * ring-buffered output, metrics, and tunnels to ports a test listens on. What the sandbox
 * it belongs to may do now (running, paused, gone) is the host's to say, through `hooks`.
 */
import { Duplex } from "node:stream";
import { setTimeout as delay } from "node:timers/promises";
import { DenError, type DirEntry, type FileStat, type GuestCommand, type GuestExecOptions, type GuestExecProcess, type GuestExecResult, type GuestFileOwner, type GuestFileSource, type GuestMetrics, type HostGuest, type ListeningPort, type ProcInfo, type ProcReadReply, type ProcWaitReply } from "@den/protocol";
import { components, fsError, serializeTree, type MemoryFs, type Owner, type SerialNode } from "./memory-fs.js";
import { ExecStream, GuestProcess, RING_MAX, StdinPipe, type SerialProc } from "./memory-process.js";
import { knownProgram, runArgv, runScript } from "./mini-shell.js";

/** A scripted answer to an exec (`MemoryHostAgent.script`). */
export interface ScriptReply {
  stdout?: string | Buffer;
  stderr?: string | Buffer;
  exitCode?: number;
  /** Real time it takes (a timeout or kill meanwhile ends it as it would a command). */
  delayMs?: number;
}

/** What a test's server on a guest port does with each connection. */
export type PortHandler = (socket: Duplex) => void;

export interface GuestHooks {
  /** At the start of every call: throws if the guest cannot be reached now (or a fault says so). */
  enter(call: string): Promise<void>;
  /** The same check, for a message to an exec already running. */
  reachable(): void;
  /** A test's scripted reply for this command, if one matches. */
  scripted(command: string, opts: GuestExecOptions): Promise<ScriptReply | undefined>;
  listener(port: number): PortHandler | undefined;
  ports(): number[];
  now(): number;
  shape(): { vcpus: number; memoryMb: number; diskMb: number };
  /** CPU busy now, as a share of one vCPU. */
  cpuShare(): number;
  /** What a snapshot would keep of the guest's processes changed (one started, wrote, ended). */
  changed?(): void;
}

/** What a snapshot keeps of a guest: its root filesystem and its buffered processes. */
export interface GuestImage {
  files: SerialNode;
  processes: SerialProc[];
  nextProc: number;
  nextPid: number;
}

interface GuestUser extends Owner {
  name: string;
  home: string;
}

/** Exited buffered processes kept for reads and waits (the guest agent's MAX_KEPT). */
const MAX_KEPT = 256;
const FILE_CHUNK = 64 * 1024;
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const USER_NAME = /^[A-Za-z0-9._][A-Za-z0-9._-]*\$?$/;

const commandText = (c: GuestCommand) => (typeof c === "string" ? c : c.join(" "));

/** A guest user's name as the agent takes it (the runtime's checkGuestUser). */
function checkUser(user: unknown): asserts user is string {
  if (typeof user !== "string" || user.length > 32 || !USER_NAME.test(user)) {
    throw new DenError("invalid_argument", `user must be a guest user name (at most 32 of A-Z a-z 0-9 . _ -), got ${JSON.stringify(user)?.slice(0, 64)}`);
  }
}

/** The runtime's checks of an exec request (execBody), before anything reaches the guest. */
function checkExec(command: GuestCommand, opts: GuestExecOptions): void {
  if (typeof command === "string") {
    if (!command.length) throw new DenError("invalid_argument", "command is empty");
  } else if (!Array.isArray(command) || !command.length || command.some((a) => typeof a !== "string")) {
    throw new DenError("invalid_argument", "argv must be a non-empty array of strings");
  }
  if (opts.timeoutMs !== undefined && (!Number.isFinite(opts.timeoutMs) || opts.timeoutMs < 0)) {
    throw new DenError("invalid_argument", `timeout must be a non-negative number of milliseconds, got ${opts.timeoutMs}`);
  }
  if (opts.cwd !== undefined && !opts.cwd.startsWith("/")) throw new DenError("invalid_argument", `cwd must be absolute, got ${opts.cwd}`);
  if (opts.user !== undefined) checkUser(opts.user);
}

/** Two Duplex ends joined: what one writes, the other reads (a loopback connection). */
export function duplexPair(): [Duplex, Duplex] {
  const ends: Duplex[] = [];
  const end = (other: () => Duplex) => new Duplex({
    read() {},
    write(chunk: Buffer, _enc, cb) {
      other().push(chunk);
      cb();
    },
    final(cb) {
      other().push(null);
      cb();
    },
    destroy(err, cb) {
      // A reset: the other end sees its peer go.
      const o = other();
      if (!o.destroyed && !o.readableEnded) o.push(null);
      cb(err);
    },
  });
  ends.push(end(() => ends[1]!), end(() => ends[0]!));
  return [ends[0]!, ends[1]!];
}

/**
 * A guest found by its sandbox's id at each call, as HttpGuest's calls are: `resolve` throws
 * what a call meets when there is none (an unknown sandbox, a host that does not answer).
 */
export function guestById(resolve: () => HostGuest): HostGuest {
  return {
    exec: async (command, opts) => resolve().exec(command, opts),
    execStream: async (command, opts) => resolve().execStream(command, opts),
    spawn: async (command, opts) => resolve().spawn(command, opts),
    metrics: async () => resolve().metrics(),
    tunnel: async (port) => resolve().tunnel(port),
    listeningPorts: async () => resolve().listeningPorts(),
    processes: {
      list: async () => resolve().processes.list(),
      read: async (proc, channel, offset, max) => resolve().processes.read(proc, channel, offset, max),
      wait: async (proc, timeoutMs) => resolve().processes.wait(proc, timeoutMs),
      write: async (proc, data, eof) => resolve().processes.write(proc, data, eof),
      signal: async (proc, signal) => resolve().processes.signal(proc, signal),
      kill: async (proc) => resolve().processes.kill(proc),
    },
    files: {
      readStream: async function* (path, opts) {
        yield* resolve().files.readStream(path, opts);
      },
      write: async (path, data, opts) => resolve().files.write(path, data, opts),
      stat: async (path) => resolve().files.stat(path),
      list: async (path) => resolve().files.list(path),
      mkdir: async (path, opts) => resolve().files.mkdir(path, opts),
      remove: async (path, opts) => resolve().files.remove(path, opts),
      rename: async (from, to) => resolve().files.rename(from, to),
      setXattrs: async (path, attrs) => resolve().files.setXattrs(path, attrs),
      getXattrs: async (path) => resolve().files.getXattrs(path),
    },
  };
}

export class MemoryGuest implements HostGuest {
  private readonly procs = new Map<number, GuestProcess>();
  private nextProc: number;
  private nextPid: number;

  constructor(readonly fs: MemoryFs, private readonly hooks: GuestHooks, image?: Omit<GuestImage, "files">) {
    this.nextProc = image?.nextProc ?? 1;
    this.nextPid = image?.nextPid ?? 300;
    for (const s of image?.processes ?? []) {
      const p = GuestProcess.from(s);
      p.onChange = () => this.hooks.changed?.();
      this.procs.set(s.proc, p);
    }
  }

  /** Its state as a snapshot keeps it (volumes are not its files: they are images of their own). */
  image(): GuestImage {
    const processes = [...this.procs.values()].flatMap((p) => p.serialize() ?? []);
    return { files: serializeTree(this.fs.rootFs.root), processes, nextProc: this.nextProc, nextPid: this.nextPid };
  }

  /** Its VM is gone: every process with it; a streamed exec's caller sees `error`. */
  lose(error: Error): void {
    for (const p of this.procs.values()) p.lose(error);
    this.procs.clear();
  }

  /** Processes running now (a test's view). */
  running(): ProcInfo[] {
    return [...this.procs.values()].filter((p) => p.running).map((p) => p.info());
  }

  private users(): Map<string, GuestUser> {
    const out = new Map<string, GuestUser>();
    let passwd = "";
    try {
      passwd = this.fs.read("/etc/passwd").toString();
    } catch {
      // no passwd: only root, as the agent falls back to
    }
    for (const line of passwd.split("\n")) {
      const [name, , uid, gid, , home] = line.split(":");
      if (name && home !== undefined) out.set(name, { name, uid: Number(uid), gid: Number(gid), home });
    }
    if (!out.has("root")) out.set("root", { name: "root", uid: 0, gid: 0, home: "/root" });
    return out;
  }

  private user(name: string | undefined): GuestUser {
    if (name === undefined) return this.users().get("root")!;
    checkUser(name);
    const u = this.users().get(name);
    if (!u) throw new DenError("invalid_argument", `no user "${name}" in the guest's /etc/passwd`);
    return u;
  }

  private owner(opts: GuestFileOwner): Owner {
    const u = this.user(opts.user);
    return { uid: u.uid, gid: u.gid };
  }

  // ---- processes ----

  /**
   * Starts a command as a process of the table: its run goes on behind the answer. A
   * streamed one's reader is attached before it runs, so no output is lost.
   */
  private start(command: GuestCommand, opts: GuestExecOptions, mode: "stream"): Promise<ExecStream>;
  private start(command: GuestCommand, opts: GuestExecOptions, mode: "buffer", bufferBytes?: number): Promise<GuestProcess>;
  private async start(command: GuestCommand, opts: GuestExecOptions, mode: "stream" | "buffer", bufferBytes?: number): Promise<GuestProcess | ExecStream> {
    checkExec(command, opts);
    if (bufferBytes !== undefined && !(Number.isInteger(bufferBytes) && bufferBytes > 0 && bufferBytes <= RING_MAX)) {
      throw new DenError("invalid_argument", "timeout_ms, window or buffer_bytes out of range");
    }
    const user = this.user(opts.user);
    const home = this.fs.find(user.home)?.type === "dir";
    const cwd = opts.cwd ?? (opts.user !== undefined && home ? user.home : "/");
    if (this.fs.find(cwd)?.type !== "dir") throw new DenError("cwd_not_found", `cwd ${cwd}: not a directory`);
    const reply = await this.hooks.scripted(commandText(command), opts);
    if (!reply && Array.isArray(command) && !knownProgram(command[0]!)) throw new DenError("not_found", `${command[0]}: No such file or directory`);
    const env: Record<string, string> = {
      PATH, HOME: opts.user !== undefined ? user.home : "/root", LANG: "C.UTF-8", USER: user.name,
      ...(opts.user !== undefined ? { LOGNAME: user.name } : {}), ...(opts.pty ? { TERM: "xterm-256color" } : {}), ...opts.env,
    };
    // Stdin stays open for writes only if asked (interactive, a terminal); else it is the given bytes, then EOF.
    const open = opts.interactive || opts.pty !== undefined;
    const stdin = open ? new StdinPipe() : StdinPipe.of(opts.stdin);
    if (open && opts.stdin !== undefined) stdin.push(Buffer.from(opts.stdin));
    const p = new GuestProcess(this.nextProc++, this.nextPid++, typeof command === "string" ? { cmd: command } : { argv: command }, mode, this.hooks.now(), {
      ...(open ? { stdin } : {}), ...(bufferBytes ? { bufferBytes } : {}), ...(opts.pty ? { pty: opts.pty } : {}),
    });
    this.add(p);
    const stream = mode === "stream" ? new ExecStream(p, () => this.hooks.reachable()) : undefined;
    void this.run(p, command, reply, { cwd, env, owner: { uid: user.uid, gid: user.gid }, stdin, timeoutMs: opts.timeoutMs });
    return stream ?? p;
  }

  private add(p: GuestProcess): void {
    this.procs.set(p.proc, p);
    // A buffered process is part of the guest's state (a streamed one, of its exec's connection).
    if (p.mode === "buffer") {
      p.onChange = () => this.hooks.changed?.();
      this.hooks.changed?.();
    }
    // A streamed exec leaves the table when it ends; exited buffered ones are kept, the oldest dropped.
    void p.ended().then(() => {
      if (p.mode === "stream") this.procs.delete(p.proc);
      const exited = [...this.procs.values()].filter((q) => !q.running);
      if (exited.length > MAX_KEPT) this.procs.delete(exited[0]!.proc);
    });
  }

  private async run(p: GuestProcess, command: GuestCommand, reply: ScriptReply | undefined, o: { cwd: string; env: Record<string, string>; owner: Owner; stdin: StdinPipe; timeoutMs: number | undefined }): Promise<void> {
    const timer = o.timeoutMs ? setTimeout(() => p.signal(9, true), o.timeoutMs) : undefined;
    try {
      let code: number;
      if (reply) {
        if (reply.delayMs) await delay(reply.delayMs, undefined, { signal: p.abort.signal });
        if (reply.stdout !== undefined) await p.output("stdout", Buffer.from(reply.stdout));
        if (reply.stderr !== undefined) await p.output("stderr", Buffer.from(reply.stderr));
        code = reply.exitCode ?? 0;
      } else {
        const io = {
          fs: this.fs, owner: o.owner, state: { cwd: o.cwd, env: o.env }, stdin: o.stdin, signal: p.abort.signal,
          out: (d: Buffer) => p.output("stdout", d), err: (d: Buffer) => p.output("stderr", d),
          background: (cmd: string) => this.daemon(cmd),
          kill: (pid: number, signal: number) => this.signalPid(pid, signal),
          processes: () => [...this.procs.values()].filter((p) => p.running).map((p) => ({ pid: p.pid, cmdline: p.commandLine() })),
        };
        code = typeof command === "string" ? await runScript(command, io) : await runArgv(command, io);
      }
      p.finish({ exitCode: code, signal: null, timedOut: false });
    } catch (e) {
      // Ended from outside (a kill, a timeout, its VM gone): its status is set already.
      if (p.running) {
        await p.output("stderr", Buffer.from(`sh: ${(e as Error).message}\n`));
        p.finish({ exitCode: 2, signal: null, timedOut: false });
      }
    } finally {
      clearTimeout(timer);
    }
  }

  /** `cmd &`: a process that runs until it is killed (a server, as far as a test can tell); its pid. */
  private daemon(cmd: string): number {
    const p = new GuestProcess(this.nextProc++, this.nextPid++, { cmd }, "buffer", this.hooks.now());
    this.add(p);
    return p.pid;
  }

  /** The shell's `kill`: signal 0 only asks whether a process of that pid runs. False: none does. */
  private signalPid(pid: number, signal: number): boolean {
    const p = [...this.procs.values()].find((q) => q.pid === pid && q.running);
    if (!p) return false;
    if (signal !== 0) p.signal(signal);
    return true;
  }

  private proc(id: number): GuestProcess {
    const p = this.procs.get(id);
    if (!p) throw new DenError("proc_not_found", `no process ${id}`);
    return p;
  }

  async exec(command: GuestCommand, opts: GuestExecOptions = {}): Promise<GuestExecResult> {
    checkExec(command, opts);
    await this.hooks.enter("exec");
    const max = opts.maxOutputBytes ?? 64 * 1024 * 1024;
    const stream = await this.start(command, opts, "stream");
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const size = { stdout: 0, stderr: 0 };
    for await (const c of stream) {
      size[c.stream] += c.data.length;
      if (size[c.stream] > max) {
        await stream.kill().catch(() => undefined);
        throw new DenError("payload_too_large", `${c.stream} exceeded ${max} bytes; use a streamed exec`);
      }
      (c.stream === "stdout" ? out : err).push(c.data);
    }
    return { stdout: Buffer.concat(out), stderr: Buffer.concat(err), ...(await stream.wait()) };
  }

  async execStream(command: GuestCommand, opts: GuestExecOptions = {}): Promise<GuestExecProcess> {
    checkExec(command, opts);
    await this.hooks.enter("execStream");
    return this.start(command, opts, "stream");
  }

  async spawn(command: GuestCommand, opts: GuestExecOptions & { bufferBytes?: number } = {}): Promise<{ proc: number; pid: number }> {
    checkExec(command, opts);
    await this.hooks.enter("spawn");
    const p = await this.start(command, opts, "buffer", opts.bufferBytes);
    return { proc: p.proc, pid: p.pid };
  }

  readonly processes = {
    list: async (): Promise<ProcInfo[]> => {
      await this.hooks.enter("processes.list");
      return [...this.procs.values()].map((p) => p.info());
    },
    read: async (proc: number, channel: "stdout" | "stderr", offset = 0, max = 256 * 1024): Promise<ProcReadReply> => {
      await this.hooks.enter("processes.read");
      return this.proc(proc).read(channel, offset, max);
    },
    wait: async (proc: number, timeoutMs = 0): Promise<ProcWaitReply> => {
      if (!(timeoutMs >= 0)) throw new DenError("invalid_argument", "timeout must be >= 0");
      await this.hooks.enter("processes.wait");
      const p = this.proc(proc);
      if (timeoutMs > 0) await p.ended(timeoutMs);
      const i = p.info();
      return i.running ? { running: true } : { running: false, exit_code: i.exit_code, signal: i.signal, timed_out: i.timed_out };
    },
    write: async (proc: number, data: Buffer | string, eof = false): Promise<void> => {
      await this.hooks.enter("processes.write");
      this.proc(proc).write(Buffer.from(data), eof);
    },
    signal: async (proc: number, signal: number): Promise<void> => {
      await this.hooks.enter("processes.signal");
      this.proc(proc).signal(signal);
    },
    kill: async (proc: number): Promise<void> => {
      await this.hooks.enter("processes.kill");
      this.proc(proc).signal(9);
    },
  };

  // ---- files ----

  readonly files = {
    readStream: (path: string, opts: { offset?: number; length?: number } = {}): AsyncGenerator<Buffer> => this.readStream(path, opts),
    write: async (path: string, data: GuestFileSource, opts: { mode?: number; parents?: boolean } & GuestFileOwner = {}): Promise<number> => {
      components(path);
      await this.hooks.enter("files.write");
      const owner = this.owner(opts);
      const bytes = await this.collect(data, path);
      return this.fs.write(path, bytes, { mode: opts.mode ?? 0o644, parents: opts.parents ?? true, owner });
    },
    stat: async (path: string): Promise<FileStat> => {
      components(path);
      await this.hooks.enter("files.stat");
      return this.fs.stat(path);
    },
    list: async (path: string): Promise<{ entries: DirEntry[]; truncated: boolean }> => {
      components(path);
      await this.hooks.enter("files.list");
      return this.fs.list(path);
    },
    mkdir: async (path: string, opts: { parents?: boolean; mode?: number } & GuestFileOwner = {}): Promise<void> => {
      components(path);
      await this.hooks.enter("files.mkdir");
      this.fs.mkdir(path, { parents: opts.parents ?? true, mode: opts.mode ?? 0o755, owner: this.owner(opts) });
    },
    remove: async (path: string, opts: { recursive?: boolean } = {}): Promise<void> => {
      if (!components(path).length) throw new DenError("invalid_argument", "refusing to remove /");
      await this.hooks.enter("files.remove");
      this.fs.remove(path, opts);
    },
    rename: async (from: string, to: string): Promise<void> => {
      components(from, "from");
      components(to, "to");
      await this.hooks.enter("files.rename");
      this.fs.rename(from, to);
    },
    setXattrs: async (path: string, attrs: Record<string, string>): Promise<void> => {
      components(path);
      await this.hooks.enter("files.setXattrs");
      this.fs.setXattrs(path, attrs);
    },
    getXattrs: async (path: string): Promise<Record<string, string>> => {
      components(path);
      await this.hooks.enter("files.getXattrs");
      return this.fs.getXattrs(path);
    },
  };

  private async *readStream(path: string, opts: { offset?: number; length?: number }): AsyncGenerator<Buffer> {
    components(path);
    await this.hooks.enter("files.readStream");
    const data = this.fs.read(path, opts.offset ?? 0, opts.length ?? -1);
    for (let o = 0; o < data.length; o += FILE_CHUNK) yield data.subarray(o, o + FILE_CHUNK);
  }

  /** A write's source as one buffer, refused as soon as it could not fit the disk. */
  private async collect(data: GuestFileSource, path: string): Promise<Buffer> {
    if (typeof data === "string" || data instanceof Uint8Array) return Buffer.from(data);
    const parts: Buffer[] = [];
    let n = 0;
    for await (const chunk of data) {
      n += chunk.length;
      if (n > this.fs.rootFs.limitBytes) throw fsError("disk_full", path);
      parts.push(Buffer.from(chunk));
    }
    return Buffer.concat(parts);
  }

  // ---- the rest ----

  async metrics(): Promise<GuestMetrics> {
    await this.hooks.enter("metrics");
    const s = this.hooks.shape();
    const memTotal = s.memoryMb * 1024 * 1024;
    const used = this.fs.usedBytes();
    return {
      timestampMs: this.hooks.now(), cpuCount: s.vcpus, cpuUsedPct: Math.min(100, (100 * this.hooks.cpuShare()) / s.vcpus),
      memTotalBytes: memTotal, memUsedBytes: Math.min(memTotal, 48 * 1024 * 1024 + 4 * 1024 * 1024 * this.running().length),
      memCacheBytes: Math.min(memTotal, used), diskTotalBytes: s.diskMb * 1024 * 1024, diskUsedBytes: Math.min(used, s.diskMb * 1024 * 1024),
    };
  }

  async tunnel(port: number): Promise<Duplex> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new DenError("invalid_argument", `port must be an integer in 1..65535, got ${port}`);
    await this.hooks.enter("tunnel");
    const handler = this.hooks.listener(port);
    if (!handler) throw new DenError("connection_refused", `connect to port ${port}: Connection refused`);
    const [ours, theirs] = duplexPair();
    handler(theirs);
    return ours;
  }

  async listeningPorts(): Promise<ListeningPort[]> {
    await this.hooks.enter("listeningPorts");
    return this.hooks.ports().map((port) => ({ port, address: "127.0.0.1", family: 4 as const }));
  }
}
