import { WebSocket } from "ws";
import { DenError, ExecOutput, errorFromWire, host, type GuestChunk, type GuestExecProcess, type GuestExit } from "@den/protocol";
import { transportError, type HostHttp } from "./fetch.js";
import { errorFromResponse } from "./wire-errors.js";

/** Output queued here past this stops the socket being read (TCP then holds the host back, and it the guest). */
const QUEUE_HIGH = 1024 * 1024;
const QUEUE_LOW = 256 * 1024;
/** How long the host has to start the process, and to answer a control message. */
const START_MS = 60_000;
const CONTROL_MS = 30_000;

/**
 * A streamed exec on a host over a WebSocket (`/host/v1/sandboxes/:id/exec/ws`), with the
 * runtime ExecProcess's surface: output by async iteration at the reader's pace, stdin,
 * resize, signals, kill, wait.
 */
export class WsExecProcess implements GuestExecProcess {
  proc = 0;
  pid = 0;
  /** Output queued past QUEUE_HIGH stops the socket being read until the reader is below QUEUE_LOW. */
  private readonly output = new ExecOutput({
    high: QUEUE_HIGH, low: QUEUE_LOW,
    pause: () => this.ws.pause(),
    resume: () => this.ws.resume(),
  });
  private acks = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  private seq = 0;

  private constructor(private readonly ws: WebSocket) {}

  static start(http: HostHttp, sandbox: string, req: host.ExecRequest): Promise<WsExecProcess> {
    const url = http.url(`/host/v1/sandboxes/${encodeURIComponent(sandbox)}/exec/ws`).replace(/^http/, "ws");
    const what = `exec stream in ${sandbox}`;
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { ...http.tls, maxPayload: 2 * 1024 * 1024, handshakeTimeout: START_MS });
      const p = new WsExecProcess(ws);
      const timer = setTimeout(() => {
        ws.terminate();
        reject(new DenError("timeout", `${what}: the host did not start it within ${START_MS} ms`));
      }, START_MS);
      let started = false;
      ws.on("open", () => ws.send(JSON.stringify(req)));
      ws.on("unexpected-response", (_r, res) => {
        clearTimeout(timer);
        let text = "";
        res.on("data", (c: Buffer) => (text = (text + c.toString("utf8")).slice(0, 64 * 1024)));
        res.on("end", () => reject(errorFromResponse(res.statusCode ?? 500, text, what)));
      });
      ws.on("error", (e) => {
        clearTimeout(timer);
        if (!started) reject(transportError(e, what, http.base, START_MS));
        p.finish(undefined, transportError(e, what, http.base, undefined));
      });
      ws.on("close", () => {
        clearTimeout(timer);
        const gone = new DenError("agent_unavailable", `${what}: the connection to the host agent closed before the process exited`);
        if (!started) reject(p.output.error ?? gone);
        p.finish(undefined, gone);
      });
      ws.on("message", (data: Buffer, isBinary: boolean) => {
        if (isBinary) return p.onOutput(data);
        let m: host.ExecServerMessage;
        try {
          m = host.ExecServerMessage.parse(JSON.parse(data.toString("utf8")));
        } catch {
          p.finish(undefined, new DenError("agent_protocol_error", `${what}: a message off the protocol`));
          ws.terminate();
          return;
        }
        if (m.type === "started") {
          started = true;
          clearTimeout(timer);
          p.proc = m.proc;
          p.pid = m.pid;
          resolve(p);
        } else if (m.type === "ack") {
          const a = p.acks.get(m.id);
          p.acks.delete(m.id);
          if (m.error) a?.reject(errorFromWire(m.error.code, m.error.message, m.error.details));
          else a?.resolve();
        } else if (m.type === "exit") {
          p.finish({ exitCode: m.exitCode, signal: m.signal, timedOut: m.timedOut });
        } else {
          const err = errorFromWire(m.error.code, m.error.message, m.error.details);
          if (!started) {
            clearTimeout(timer);
            reject(err);
          }
          p.finish(undefined, err);
        }
      });
    });
  }

  private onOutput(data: Buffer): void {
    if (data.length < 1) return;
    const stream = data[0] === host.ExecChannel.stderr ? "stderr" : "stdout";
    this.output.push({ stream, data: data.subarray(1) });
  }

  private finish(exit: GuestExit | undefined, error?: Error): void {
    if (!this.output.finish(exit, error)) return;
    for (const a of this.acks.values()) a.reject(error ?? new DenError("invalid_state", "the process has exited"));
    this.acks.clear();
  }

  [Symbol.asyncIterator](): AsyncIterator<GuestChunk> {
    return this.output[Symbol.asyncIterator]();
  }

  /** Without a reader, output is dropped as it comes, so the process can finish. */
  wait(): Promise<GuestExit> {
    return this.output.wait();
  }

  write(data: Buffer | string): Promise<void> {
    if (this.output.ended) return Promise.reject(this.output.error ?? new DenError("invalid_state", "the process has exited"));
    const frame = Buffer.concat([Buffer.of(host.ExecChannel.stdin), Buffer.from(data)]);
    // Resolves once the bytes have gone out: the socket's own flow control paces the writer.
    return new Promise((resolve, reject) => this.ws.send(frame, { binary: true }, (e) => (e ? reject(new DenError("agent_unavailable", `stdin: ${e.message}`)) : resolve())));
  }

  closeStdin(): void {
    if (this.ws.readyState === this.ws.OPEN) this.ws.send(JSON.stringify({ type: "close_stdin" } satisfies host.ExecClientMessage));
  }

  private control(m: host.ExecClientMessage & { id: number }): Promise<void> {
    if (this.output.ended || this.ws.readyState !== this.ws.OPEN) return Promise.reject(this.output.error ?? new DenError("invalid_state", "the process has exited"));
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.acks.delete(m.id);
        reject(new DenError("timeout", `${m.type}: the host did not answer within ${CONTROL_MS} ms`));
      }, CONTROL_MS);
      this.acks.set(m.id, { resolve: () => (clearTimeout(timer), resolve()), reject: (e) => (clearTimeout(timer), reject(e)) });
      this.ws.send(JSON.stringify(m));
    });
  }

  resize(rows: number, cols: number): Promise<void> {
    return this.control({ type: "resize", id: ++this.seq, rows, cols });
  }

  signal(signal: number): Promise<void> {
    return this.control({ type: "signal", id: ++this.seq, signal });
  }

  async kill(): Promise<void> {
    // After it exited there is nothing left to kill.
    if (this.output.exit) return;
    await this.control({ type: "kill", id: ++this.seq });
  }
}
