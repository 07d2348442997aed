import WebSocket from "ws";
import type { DenClient, RequestOptions } from "./client.js";
import { ERROR_STATUS, isErrorCode } from "@den/protocol";
import { DenApiError, apiError } from "./errors.js";

/** Options of {@link Sandbox.pty}. */
export interface PtyOptions extends RequestOptions {
  /** The command (a shell string); default a login bash. */
  cmd?: string;
  cwd?: string;
  rows?: number;
  cols?: number;
  /** Called with terminal output as it arrives (raw bytes; may split UTF-8 characters). */
  onData?(data: Uint8Array): void;
}

/**
 * An interactive terminal in a sandbox, over a WebSocket: keystrokes in, terminal output
 * out, resize and signals. Ctrl-C is `write("\x03")`: the terminal turns it into SIGINT
 * for the foreground process, as on a real terminal.
 *
 * @example
 * ```ts
 * const term = await sbx.pty({ rows: 40, cols: 120, onData: (d) => process.stdout.write(d) });
 * term.write("ls -la\n");
 * await term.resize(50, 160);
 * term.write("exit\n");
 * const { exitCode } = await term.wait();
 * ```
 */
export class Pty {
  readonly #ws: WebSocket;
  readonly #exit: Promise<{ exitCode: number | null; signal: number | null }>;

  private constructor(ws: WebSocket, exit: Promise<{ exitCode: number | null; signal: number | null }>) {
    this.#ws = ws;
    this.#exit = exit;
  }

  /** Opens the terminal; resolves once the WebSocket is connected. */
  static async open(client: DenClient, sandboxId: string, opts: PtyOptions = {}): Promise<Pty> {
    const q = new URLSearchParams();
    if (opts.cmd) q.set("cmd", opts.cmd);
    if (opts.cwd) q.set("cwd", opts.cwd);
    q.set("rows", String(opts.rows ?? 24));
    q.set("cols", String(opts.cols ?? 80));
    const url = `${client.apiUrl.replace(/^http/, "ws")}/v1/sandboxes/${encodeURIComponent(sandboxId)}/pty?${q}`;
    const ws = new WebSocket(url, { headers: client.authHeaders(), maxPayload: 4 * 1024 * 1024 });
    let failure: DenApiError | undefined;
    const exit = new Promise<{ exitCode: number | null; signal: number | null }>((resolve, reject) => {
      ws.on("message", (data: Buffer, binary: boolean) => {
        if (binary) {
          opts.onData?.(new Uint8Array(data));
          return;
        }
        const m = JSON.parse(data.toString()) as { type: string; exit_code?: number | null; signal?: number | null; error?: { code: string; message: string } };
        if (m.type === "exit") resolve({ exitCode: m.exit_code ?? null, signal: m.signal ?? null });
        else if (m.type === "error" && m.error) failure = apiError(m.error.code, m.error.message, isErrorCode(m.error.code) ? ERROR_STATUS[m.error.code] : 500);
      });
      ws.on("close", () => reject(failure ?? new DenApiError("aborted", "the terminal closed before its command exited", 499)));
      ws.on("error", (e) => reject(e));
    });
    exit.catch(() => undefined);
    opts.signal?.addEventListener("abort", () => ws.close(), { once: true });
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("unexpected-response", (_req, res) => reject(apiError(res.statusCode === 401 ? "unauthorized" : "invalid_state", `terminal refused: HTTP ${res.statusCode}`, res.statusCode ?? 500)));
      ws.once("error", reject);
    });
    return new Pty(ws, exit);
  }

  /** Sends keystrokes (or any bytes) to the terminal. */
  write(data: string | Uint8Array): void {
    this.#ws.send(typeof data === "string" ? Buffer.from(data) : data, { binary: true });
  }

  /** Resizes the terminal; the foreground program gets SIGWINCH. */
  async resize(rows: number, cols: number): Promise<void> {
    this.#ws.send(JSON.stringify({ type: "resize", rows, cols }));
  }

  /** Sends a signal to the terminal's process group. */
  async signal(signal: number): Promise<void> {
    this.#ws.send(JSON.stringify({ type: "signal", signal }));
  }

  /** Resolves with the exit status once the command ends. */
  wait(): Promise<{ exitCode: number | null; signal: number | null }> {
    return this.#exit;
  }

  /** Closes the terminal (the command is killed). */
  close(): void {
    this.#ws.close();
  }
}
