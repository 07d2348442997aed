import { Channel, DenError, errorFromWire, type DirEntry, type FileStat } from "@den/protocol";
import type { AgentClient } from "./agent-client.js";

/** Credit granted for a file download: the most a reader buffers before it reads on. */
const FILE_WINDOW = 1024 * 1024;

export type FileSource = Buffer | string | Uint8Array | AsyncIterable<Uint8Array>;

export function checkGuestPath(path: string, what = "path"): void {
  if (typeof path !== "string" || !path.startsWith("/")) throw new DenError("invalid_argument", `${what} must be an absolute guest path, got ${JSON.stringify(path)}`);
  if (path.includes("\0")) throw new DenError("invalid_argument", `${what} contains a NUL byte`);
  if (Buffer.byteLength(path) > 4096) throw new DenError("invalid_argument", `${what} is longer than 4096 bytes`);
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
            error = errorFromWire(ev.code, `${path}: ${String(ev.message ?? "read failed")}`);
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
  async write(path: string, data: FileSource, opts: { mode?: number; parents?: boolean } = {}): Promise<number> {
    checkGuestPath(path);
    const agent = await this.agent();
    let id = 0;
    let settle: { resolve: (n: number) => void; reject: (e: Error) => void } | undefined;
    const finished = new Promise<number>((resolve, reject) => (settle = { resolve, reject }));
    finished.catch(() => undefined);
    await agent.requestRaw(
      { op: "file.write", path, mode: opts.mode ?? 0o644, parents: opts.parents ?? true },
      {
        onEvent: (ev) => {
          agent.release(id);
          if (ev.event === "done") settle!.resolve(Number(ev.bytes));
          else settle!.reject(new DenError(ev.code === "permission_denied" ? "permission_denied" : "io_error", String(ev.message ?? "write failed")));
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

  async mkdir(path: string, opts: { parents?: boolean; mode?: number } = {}): Promise<void> {
    checkGuestPath(path);
    await (await this.agent()).request("file.mkdir", { path, parents: opts.parents ?? true, mode: opts.mode ?? 0o755 });
  }

  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    checkGuestPath(path);
    if (path === "/") throw new DenError("invalid_argument", "refusing to remove /");
    await (await this.agent()).request("file.remove", { path, recursive: opts.recursive ?? false });
  }

  // TODO(e2b-guest): placeholders of the contract until the guest agent has these ops; never landed as is.
  async setXattrs(_path: string, _attrs: Record<string, string>): Promise<void> {
    throw new DenError("internal", "setXattrs is not implemented yet");
  }

  async getXattrs(_path: string): Promise<Record<string, string>> {
    throw new DenError("internal", "getXattrs is not implemented yet");
  }

  async rename(from: string, to: string): Promise<void> {
    checkGuestPath(from, "from");
    checkGuestPath(to, "to");
    await (await this.agent()).request("file.rename", { from, to });
  }
}
