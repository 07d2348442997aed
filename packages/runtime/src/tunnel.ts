import { Duplex } from "node:stream";
import { Channel, DenError, type ListeningPort } from "@den/protocol";
import type { AgentClient, StreamSink } from "./agent-client.js";

/** Credit granted for bytes from the guest: the most a tunnel holds on the host before its reader reads. */
const TUNNEL_WINDOW = 256 * 1024;

export interface TunnelOptions {
  /** Aborts the connect, or later closes the tunnel (with a reset). */
  signal?: AbortSignal;
  /** Loopback address inside the guest: "127.0.0.1" (default, then "::1" if it refuses) or "::1". */
  host?: string;
  /** Keep the writable side open after the server finished sending (default true: half-close works both ways). */
  allowHalfOpen?: boolean;
}

/**
 * One TCP connection to a server inside the guest, carried by its agent (tcp.connect): a
 * socket-like Duplex. Reading grants the guest credit as the consumer reads, so a slow
 * reader makes the server's sends block; writes wait for the guest's credit.
 */
class TunnelSocket extends Duplex {
  id = 0;
  /** The guest sent its final "closed": the stream is over, nothing to cancel. */
  private over = false;
  private received = 0;
  private granted = 0;
  private grantQueued = false;
  private eofSeen = false;
  private idleMs = 0;
  private idleTimer: NodeJS.Timeout | undefined;
  private unlisten: (() => void) | undefined;

  constructor(private readonly agent: AgentClient, readonly remotePort: number, opts: TunnelOptions) {
    super({ allowHalfOpen: opts.allowHalfOpen ?? true, readableHighWaterMark: 64 * 1024, writableHighWaterMark: 64 * 1024 });
  }

  readonly sink: StreamSink = {
    onData: (ch, data) => {
      if (ch !== Channel.Stdout || this.destroyed) return;
      this.received += data.length;
      this.touch();
      this.push(data);
    },
    onEof: (ch) => {
      if (ch !== Channel.Stdout) return;
      this.eofSeen = true;
      if (!this.destroyed) this.push(null);
    },
    onEvent: (ev) => {
      if (ev.event !== "closed") return;
      this.over = true;
      this.agent.release(this.id);
      if (typeof ev.error === "string") this.destroy(new DenError("io_error", `tunnel to guest port ${this.remotePort}: ${ev.error.slice(0, 512)}`));
      // Without an error both directions had ended (the stream finishes on its own), unless
      // the guest skipped its EOF: then the reader would wait forever.
      else if (!this.eofSeen) this.destroy(new DenError("agent_protocol_error", `tunnel to guest port ${this.remotePort} closed without EOF`));
    },
    onClose: (e) => {
      this.over = true;
      this.destroy(e);
    },
  };

  /** Drops a tunnel whose connect failed, or was already cancelled: nothing to tell the guest. */
  discard(): void {
    this.over = true;
    this.destroy();
  }

  /** Once connected: an abort from now on closes the tunnel. */
  opened(signal: AbortSignal | undefined): void {
    if (!signal) return;
    const onAbort = () => this.destroy(new DenError("aborted", "tunnel aborted"));
    signal.addEventListener("abort", onAbort, { once: true });
    this.unlisten = () => signal.removeEventListener("abort", onAbort);
  }

  override _read(): void {
    // read() calls this before it takes its bytes out of the buffer: count them after.
    if (this.grantQueued) return;
    this.grantQueued = true;
    queueMicrotask(() => this.grantConsumed());
  }

  /** Credits back what the consumer has taken: the guest never has more than the window in flight plus buffered here. */
  private grantConsumed(): void {
    this.grantQueued = false;
    const n = this.received - this.readableLength - this.granted;
    if (n > 0 && !this.over) {
      this.granted += n;
      this.agent.grant(this.id, Channel.Stdout, n);
    }
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (e?: Error | null) => void): void {
    this.touch();
    this.agent.write(this.id, Channel.Stdin, chunk).then(() => cb(), cb);
  }

  override _final(cb: (e?: Error | null) => void): void {
    this.agent.end(this.id, Channel.Stdin);
    cb();
  }

  override _destroy(err: Error | null, cb: (e: Error | null) => void): void {
    clearTimeout(this.idleTimer);
    this.unlisten?.();
    if (!this.over) {
      if (!err && this.readableEnded && this.writableFinished) {
        // Both directions ended (autoDestroy): the guest may still be writing our last
        // bytes to the server; its final "closed" releases the stream.
        return cb(null);
      }
      // Given up before both directions ended: the guest resets the connection.
      if (this.id) this.agent.request("stream.cancel", { stream: this.id }).catch(() => undefined);
      this.over = true;
    }
    this.agent.release(this.id);
    cb(err);
  }

  /** Like net.Socket's: 'timeout' after `ms` without bytes either way (0 turns it off). */
  setTimeout(ms: number, cb?: () => void): this {
    this.idleMs = ms;
    if (cb) {
      if (ms > 0) this.once("timeout", cb);
      else this.removeListener("timeout", cb);
    }
    this.touch();
    return this;
  }

  private touch(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = this.idleMs > 0 && !this.destroyed ? setTimeout(() => this.emit("timeout"), this.idleMs).unref() : undefined;
  }

  // No-ops that HTTP clients and pools call on sockets.
  setNoDelay(): this {
    return this;
  }

  setKeepAlive(): this {
    return this;
  }

  ref(): this {
    return this;
  }

  unref(): this {
    return this;
  }
}

/**
 * Opens a TCP connection to `port` on the guest's loopback through its agent: works even
 * when the guest has no network. Resolves once connected (rejects with
 * `connection_refused` when nothing listens there). `end()` half-closes towards the
 * server; `destroy()` resets the connection; a reset in the guest or a lost agent
 * connection destroys the stream with an error.
 *
 * @example
 * ```ts
 * const sock = await openTunnel(agent, 8000);
 * http.get({ path: "/", createConnection: () => sock }, (res) => res.pipe(process.stdout));
 * ```
 */
export async function openTunnel(agent: AgentClient, port: number, opts: TunnelOptions = {}): Promise<Duplex> {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new DenError("invalid_argument", `port must be an integer in 1..65535, got ${port}`);
  const signal = opts.signal;
  if (signal?.aborted) throw new DenError("aborted", "tunnel aborted");
  const sock = new TunnelSocket(agent, port, opts);
  const body: Record<string, unknown> = { op: "tcp.connect", port, window: TUNNEL_WINDOW };
  if (opts.host !== undefined) body.host = opts.host;
  // An abort while connecting: the guest answers the connect with `aborted`.
  const onAbort = () => void agent.request("stream.cancel", { stream: sock.id }).catch(() => undefined);
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    await agent.requestRaw(body, sock.sink, (id) => (sock.id = id));
  } catch (e) {
    sock.discard();
    throw e;
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
  if (signal?.aborted) {
    // The connect won the race with the cancel (which the guest took as a reset).
    sock.discard();
    throw new DenError("aborted", "tunnel aborted");
  }
  sock.opened(signal);
  return sock;
}

/** The TCP sockets listening inside the guest, sorted by port (with the owning process when known). */
export async function listPorts(agent: AgentClient): Promise<ListeningPort[]> {
  return (await agent.request("net.ports", {})).ports;
}
