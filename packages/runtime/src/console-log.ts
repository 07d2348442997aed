import { closeSync, ftruncateSync, openSync, readSync, statSync, writeFileSync } from "node:fs";
import { open, rename, type FileHandle } from "node:fs/promises";
import type net from "node:net";
import { connectUnix } from "./qmp.js";

/** Console output kept per sandbox: the current file plus one rotated file. */
export const CONSOLE_LOG_CAP = 1024 * 1024;

/** Console bytes waiting to be written past which the console socket is no longer read. */
const CONSOLE_HIGH_WATER = 256 * 1024;

/**
 * Reads a VM's serial console from its socket into a size-capped log: a guest flooding
 * its console costs at most 2 x CONSOLE_LOG_CAP bytes of disk and no host memory. Writes
 * are asynchronous (never on the event loop's time), and while they lag the socket is not
 * read: QEMU then holds the guest's serial port back, so the flood slows the guest alone.
 */
export class ConsoleLog {
  private file: FileHandle | undefined;
  private size = 0;
  private socket: net.Socket | undefined;
  private queue: Buffer[] = [];
  private queued = 0;
  private writing = false;
  private closed = false;

  private constructor(private readonly path: string) {}

  static async attach(socketPath: string, logPath: string): Promise<ConsoleLog> {
    const log = new ConsoleLog(logPath);
    log.file = await open(logPath, "a");
    log.size = (await log.file.stat()).size;
    try {
      log.socket = await connectUnix(socketPath);
    } catch {
      log.close();
      return log;
    }
    log.socket.on("data", (d: Buffer) => log.append(d));
    log.socket.on("error", () => undefined);
    log.socket.on("close", () => log.close());
    return log;
  }

  private append(d: Buffer): void {
    if (this.closed) return;
    this.queue.push(d);
    this.queued += d.length;
    if (this.queued > CONSOLE_HIGH_WATER) this.socket?.pause();
    if (!this.writing) void this.drain();
  }

  private async drain(): Promise<void> {
    this.writing = true;
    try {
      while (this.queue.length && !this.closed) {
        let d = Buffer.concat(this.queue.splice(0));
        this.queued = 0;
        this.socket?.resume();
        if (d.length > CONSOLE_LOG_CAP) d = d.subarray(d.length - CONSOLE_LOG_CAP);
        if (this.size + d.length > CONSOLE_LOG_CAP) {
          await this.file?.close();
          await rename(this.path, `${this.path}.1`);
          this.file = await open(this.path, "w");
          this.size = 0;
        }
        await this.file?.write(d);
        this.size += d.length;
      }
    } catch {
      // the sandbox's dir is going away (destroy): nothing to keep
    } finally {
      this.writing = false;
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.socket?.destroy();
    const f = this.file;
    this.file = undefined;
    // After a write in flight, if any (it holds the handle until it ends).
    void (async () => {
      while (this.writing) await new Promise((r) => setTimeout(r, 10));
      await f?.close().catch(() => undefined);
    })();
  }
}

/**
 * Keeps a file another process appends to (QEMU's own stderr log) under `cap` bytes:
 * the tail moves to `<path>.1` and the file is truncated in place (the writer uses O_APPEND).
 */
export function capAppendLog(path: string, cap = CONSOLE_LOG_CAP): void {
  let size: number;
  try {
    size = statSync(path).size;
  } catch {
    return;
  }
  if (size <= cap) return;
  const fd = openSync(path, "r+");
  try {
    const tail = Buffer.alloc(Math.min(cap, 64 * 1024));
    const n = readSync(fd, tail, 0, tail.length, size - tail.length);
    writeFileSync(`${path}.1`, tail.subarray(0, n));
    ftruncateSync(fd, 0);
  } finally {
    closeSync(fd);
  }
}
