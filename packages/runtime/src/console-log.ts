import { closeSync, ftruncateSync, openSync, readSync, renameSync, statSync, writeFileSync, writeSync } from "node:fs";
import type net from "node:net";
import { connectUnix } from "./qmp.js";

/** Console output kept per sandbox: the current file plus one rotated file. */
export const CONSOLE_LOG_CAP = 1024 * 1024;

/**
 * Reads a VM's serial console from its socket into a size-capped log: a guest flooding
 * its console costs at most 2 x CONSOLE_LOG_CAP bytes of disk and no host memory.
 */
export class ConsoleLog {
  private fd: number;
  private size = 0;
  private socket: net.Socket | undefined;

  private constructor(private readonly path: string) {
    this.fd = openSync(path, "a");
  }

  static async attach(socketPath: string, logPath: string): Promise<ConsoleLog> {
    const log = new ConsoleLog(logPath);
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
    if (this.fd < 0) return;
    if (this.size + d.length > CONSOLE_LOG_CAP) {
      closeSync(this.fd);
      renameSync(this.path, `${this.path}.1`);
      this.fd = openSync(this.path, "w");
      this.size = 0;
      if (d.length > CONSOLE_LOG_CAP) d = d.subarray(d.length - CONSOLE_LOG_CAP);
    }
    writeSync(this.fd, d);
    this.size += d.length;
  }

  close(): void {
    this.socket?.destroy();
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
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
