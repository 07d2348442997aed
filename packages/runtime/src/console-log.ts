import { closeSync, openSync, renameSync, writeSync } from "node:fs";
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
