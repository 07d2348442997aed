import net from "node:net";
import { EventEmitter } from "node:events";
import { DenError } from "@den/protocol";

/** Longest QMP line we accept; QEMU's replies are small, so anything bigger is a broken peer. */
const MAX_LINE = 4 * 1024 * 1024;

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  command: string;
}

export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
}

/**
 * A QEMU Machine Protocol client over a unix socket: one JSON object per line, replies
 * matched to commands by id, events emitted as "event".
 */
export class QmpClient extends EventEmitter {
  private socket: net.Socket | undefined;
  private buffer = "";
  private nextId = 1;
  private pending = new Map<string, Pending>();
  private closedError: Error | undefined;

  static async connect(path: string, timeoutMs = 10_000): Promise<QmpClient> {
    const client = new QmpClient();
    await client.open(path, timeoutMs);
    return client;
  }

  private async open(path: string, timeoutMs: number): Promise<void> {
    this.socket = await connectUnixRetry(path, timeoutMs, (why) => new DenError("qemu_error", `QMP socket ${path} did not open: ${why}`));
    const greeting = new Promise<void>((resolve, reject) => {
      this.once("greeting", resolve);
      this.once("close", () => reject(this.closedError ?? new DenError("qemu_error", "QMP closed before greeting")));
    });
    this.socket.setEncoding("utf8");
    this.socket.on("data", (d: string) => this.onData(d));
    this.socket.on("error", (e) => this.fail(e));
    this.socket.on("close", () => this.fail(new DenError("qemu_error", "QMP connection closed")));
    await greeting;
    await this.execute("qmp_capabilities");
  }

  private onData(chunk: string): void {
    this.buffer += chunk;
    if (this.buffer.length > MAX_LINE) {
      this.fail(new DenError("qemu_error", "QMP line too long"));
      this.socket?.destroy();
      return;
    }
    let nl: number;
    while ((nl = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, nl).trim();
      this.buffer = this.buffer.slice(nl + 1);
      if (!line) continue;
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      if ("QMP" in msg) this.emit("greeting");
      else if ("event" in msg) this.emit("event", msg as unknown as QmpEvent);
      else if (typeof msg.id === "string") {
        const p = this.pending.get(msg.id);
        if (!p) continue;
        this.pending.delete(msg.id);
        if ("error" in msg) {
          const err = msg.error as { class?: string; desc?: string };
          p.reject(new DenError("qemu_error", `QMP ${p.command}: ${err.desc ?? err.class ?? "error"}`));
        } else p.resolve(msg.return);
      }
    }
  }

  private fail(e: Error): void {
    if (this.closedError) return;
    this.closedError = e;
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
    this.emit("close");
  }

  get closed(): boolean {
    return this.closedError !== undefined;
  }

  /** Runs one QMP command and resolves with its `return` value. */
  execute<T = unknown>(command: string, args?: Record<string, unknown>): Promise<T> {
    if (this.closedError) return Promise.reject(this.closedError);
    const id = String(this.nextId++);
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, command });
      this.socket!.write(JSON.stringify(args ? { execute: command, arguments: args, id } : { execute: command, id }) + "\n");
    });
  }

  /** Resolves at the first event named `name` for which `match` holds. */
  waitEvent(name: string, match: (e: QmpEvent) => boolean = () => true, timeoutMs = 60_000): Promise<QmpEvent> {
    return new Promise((resolve, reject) => {
      const onEvent = (e: QmpEvent) => {
        if (e.event === name && match(e)) done(null, e);
      };
      const onClose = () => done(this.closedError ?? new DenError("qemu_error", "QMP closed"));
      const timer = setTimeout(() => done(new DenError("timeout", `no ${name} event within ${timeoutMs} ms`)), timeoutMs);
      const done = (err: Error | null, e?: QmpEvent) => {
        clearTimeout(timer);
        this.off("event", onEvent);
        this.off("close", onClose);
        if (err) reject(err);
        else resolve(e!);
      };
      this.on("event", onEvent);
      this.once("close", onClose);
    });
  }

  close(): void {
    this.socket?.destroy();
  }
}

export function connectUnix(path: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ path });
    s.once("connect", () => {
      s.off("error", reject);
      // Until the caller's own handlers are attached (after an await), an error must not crash us.
      s.on("error", () => undefined);
      resolve(s);
    });
    s.once("error", reject);
  });
}

/** Connects to a socket QEMU is about to create, retrying until it appears or time runs out. */
export async function connectUnixRetry(path: string, timeoutMs: number, onTimeout: (why: string) => Error): Promise<net.Socket> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await connectUnix(path);
    } catch (e) {
      if (Date.now() > deadline) throw onTimeout((e as Error).message);
      await new Promise((r) => setTimeout(r, 5));
    }
  }
}
