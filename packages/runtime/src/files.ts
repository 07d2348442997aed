import { Channel, DenError, type DirEntry, type FileStat, type GuestFileOwner } from "@den/protocol";
import { guestError, type AgentClient } from "./agent-client.js";

/** Credit granted for a file download: the most a reader buffers before it reads on. */
const FILE_WINDOW = 1024 * 1024;
/**
 * The codes a failed write's event may carry (the guest agent's errno mapping: a bad name,
 * a directory in the way, ...): the caller's, so kept; any other is the guest's `io_error`.
 */
const WRITE_EVENT_CODES = new Set(["file_not_found", "not_a_directory", "is_a_directory", "already_exists", "permission_denied", "invalid_argument"]);

export type FileSource = Buffer | string | Uint8Array | AsyncIterable<Uint8Array>;

export function checkGuestPath(path: string, what = "path"): void {
  if (typeof path !== "string" || !path.startsWith("/")) throw new DenError("invalid_argument", `${what} must be an absolute guest path, got ${JSON.stringify(path)}`);
  if (path.includes("\0")) throw new DenError("invalid_argument", `${what} contains a NUL byte`);
  if (Buffer.byteLength(path) > 4096) throw new DenError("invalid_argument", `${what} is longer than 4096 bytes`);
}

/** A guest user's name as the agent takes it (it looks the name up in the guest's /etc/passwd). */
export function checkGuestUser(user: unknown): asserts user is string {
  if (typeof user !== "string" || user.length > 32 || !/^[A-Za-z0-9._][A-Za-z0-9._-]*\$?$/.test(user)) {
    throw new DenError("invalid_argument", `user must be a guest user name (at most 32 of A-Z a-z 0-9 . _ -), got ${JSON.stringify(user)?.slice(0, 64)}`);
  }
}

/** The `user` field of a file call that makes something, once the agent is known to honour it. */
function ownerField(agent: AgentClient, opts: GuestFileOwner, what: string): { user?: string } {
  if (opts.user === undefined) return {};
  checkGuestUser(opts.user);
  agent.requireFeature("file.owner", what);
  return { user: opts.user };
}

/** The `user.*` attributes of a reply, checked: the guest is not trusted to keep to them. */
function userAttrs(reply: unknown): Record<string, string> {
  const attrs = (reply as { attrs?: unknown } | undefined)?.attrs;
  if (!attrs || typeof attrs !== "object" || Array.isArray(attrs)) throw new DenError("agent_protocol_error", "file.getxattrs: no attrs object in the reply");
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(attrs)) if (k.startsWith("user.") && typeof v === "string") out[k] = v;
  return out;
}

/** File operations on one guest, over its agent connection. */
export class GuestFiles {
  constructor(private readonly agent: () => Promise<AgentClient>) {}

  /**
   * Streams a file out of the guest in chunks; the guest sends only as fast as the
   * caller consumes, so a 100 MB file never sits whole in host memory.
   */
  async *readStream(path: string, opts: { offset?: number; length?: number } = {}): AsyncGenerator<Buffer> {
    checkGuestPath(path);
    const agent = await this.agent();
    const queue: Buffer[] = [];
    let done = false;
    let error: Error | undefined;
    let wake: (() => void) | undefined;
    let id = 0;
    const notify = () => wake?.();
    await agent.requestRaw(
      { op: "file.read", path, offset: opts.offset ?? 0, length: opts.length ?? -1, window: FILE_WINDOW },
      {
        onData: (_ch, data) => { queue.push(data); notify(); },
        onEof: () => { done = true; agent.release(id); notify(); },
        onEvent: (ev) => {
          if (ev.event === "error") {
            // The agent's code says whose fault it is (`unreadable`: the file's bytes cannot be read).
            error = guestError(ev.code, `${path}: ${String(ev.message ?? "read failed")}`);
            agent.release(id);
            notify();
          }
        },
        onClose: (e) => { error = e; notify(); },
      },
      (i) => (id = i),
    );
    try {
      for (;;) {
        const c = queue.shift();
        if (c) {
          yield c;
          agent.grant(id, Channel.File, c.length);
          continue;
        }
        if (error) throw error;
        if (done) return;
        await new Promise<void>((r) => (wake = r));
        wake = undefined;
      }
    } finally {
      // A reader that stops early tells the guest to stop sending.
      if (!done && !error) agent.request("stream.cancel", { stream: id }).catch(() => undefined);
      agent.release(id);
    }
  }

  async read(path: string): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const c of this.readStream(path)) parts.push(c);
    return Buffer.concat(parts);
  }

  /** Writes a file atomically (temp file + rename in the guest), streaming large sources. */
  async write(path: string, data: FileSource, opts: { mode?: number; parents?: boolean } & GuestFileOwner = {}): Promise<number> {
    checkGuestPath(path);
    const agent = await this.agent();
    const owner = ownerField(agent, opts, "a file written as a user");
    let id = 0;
    let settle: { resolve: (n: number) => void; reject: (e: Error) => void } | undefined;
    const finished = new Promise<number>((resolve, reject) => (settle = { resolve, reject }));
    finished.catch(() => undefined);
    await agent.requestRaw(
      { op: "file.write", path, mode: opts.mode ?? 0o644, parents: opts.parents ?? true, ...owner },
      {
        onEvent: (ev) => {
          agent.release(id);
          if (ev.event === "done") settle!.resolve(Number(ev.bytes));
          else settle!.reject(guestError(typeof ev.code === "string" && WRITE_EVENT_CODES.has(ev.code) ? ev.code : "io_error", String(ev.message ?? "write failed")));
        },
        onClose: (e) => settle!.reject(e),
      },
      (i) => (id = i),
    );
    try {
      if (typeof data === "string" || data instanceof Uint8Array) {
        await agent.write(id, Channel.File, Buffer.from(data));
      } else {
        for await (const chunk of data) await agent.write(id, Channel.File, Buffer.from(chunk));
      }
      agent.end(id, Channel.File);
    } catch (e) {
      agent.release(id);
      // The guest drops its temp file; the target keeps its old content.
      await agent.request("stream.cancel", { stream: id }).catch(() => undefined);
      throw e;
    }
    return finished;
  }

  async stat(path: string): Promise<FileStat> {
    checkGuestPath(path);
    return (await this.agent()).request("file.stat", { path });
  }

  async list(path: string): Promise<{ entries: DirEntry[]; truncated: boolean }> {
    checkGuestPath(path);
    return (await this.agent()).request("file.list", { path });
  }

  async mkdir(path: string, opts: { parents?: boolean; mode?: number } & GuestFileOwner = {}): Promise<void> {
    checkGuestPath(path);
    const agent = await this.agent();
    const owner = ownerField(agent, opts, "a directory made as a user");
    await agent.request("file.mkdir", { path, parents: opts.parents ?? true, mode: opts.mode ?? 0o755, ...owner });
  }

  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    checkGuestPath(path);
    if (path === "/") throw new DenError("invalid_argument", "refusing to remove /");
    await (await this.agent()).request("file.remove", { path, recursive: opts.recursive ?? false });
  }

  /** Sets `user.*` extended attributes (the agent refuses other names and bounds the sizes). */
  async setXattrs(path: string, attrs: Record<string, string>): Promise<void> {
    checkGuestPath(path);
    if (!attrs || typeof attrs !== "object" || Array.isArray(attrs) || Object.values(attrs).some((v) => typeof v !== "string")) {
      throw new DenError("invalid_argument", "attrs must be an object of strings");
    }
    const agent = await this.agent();
    agent.requireFeature("file.xattr", "extended attributes");
    await agent.request("file.setxattr", { path, attrs });
  }

  /** The file's `user.*` extended attributes (none: `{}`). */
  async getXattrs(path: string): Promise<Record<string, string>> {
    checkGuestPath(path);
    const agent = await this.agent();
    agent.requireFeature("file.xattr", "extended attributes");
    return userAttrs(await agent.request("file.getxattrs", { path }));
  }

  async rename(from: string, to: string): Promise<void> {
    checkGuestPath(from, "from");
    checkGuestPath(to, "to");
    await (await this.agent()).request("file.rename", { from, to });
  }
}
