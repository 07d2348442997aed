import { randomBytes } from "node:crypto";
import type net from "node:net";
import {
  Channel, DenError, FrameDecoder, FrameType, HEADER_BYTES, MAX_DATA_CHUNK, PROTOCOL_VERSION, SYNC_MAGIC, SYNC_NONCE_BYTES,
  encodeCredit, encodeData, encodeEof, encodeJson, errorFromWire,
  type AgentFeature, type AgentOp, type AgentOps, type Frame, type HelloReply,
} from "@den/protocol";
import { connectUnixRetry } from "./qmp.js";

/** How long the first hello waits before it is retried on a new connection (doubling each time). */
const FIRST_HELLO_PATIENCE_MS = 4_000;

/** Bytes a host discards while looking for the SYNC marker before it gives up on the guest. */
const MAX_SYNC_DISCARD = 16 * 1024 * 1024;
/**
 * Bytes of frames the host did not ask for (events, which carry no credit, and replies to
 * nothing) a guest may send: a burst, refilled per second. Real events are a few hundred
 * bytes; a guest that floods them only costs Den's event loop, so its connection goes.
 */
const UNSOLICITED_BURST = 8 * 1024 * 1024;
const UNSOLICITED_PER_SECOND = 2 * 1024 * 1024;

/**
 * How long the guest agent has to answer a request (its reply; a stream's data then flows
 * under the watchdog below). A guest that misses it is unresponsive: the request fails
 * with `guest_unresponsive` and nothing on the host waits on it any longer.
 */
export const AGENT_DEADLINE_MS = deadlineFromEnv(process.env.DEN_GUEST_DEADLINE_SECONDS, 30) * 1000;
/** Ops that may take longer in a healthy guest (a recursive remove, a rename that copies). */
const SLOW_OP_DEADLINE_MS: Record<string, number> = { "file.remove": 300_000, "file.rename": 300_000 };
/** While anything waits on the guest and it has sent nothing for this long, it is pinged... */
const WATCHDOG_IDLE_MS = 15_000;
/** ...and a ping unanswered this long closes the connection: everything waiting on it fails. */
const WATCHDOG_PING_MS = 20_000;

function deadlineFromEnv(v: string | undefined, fallback: number): number {
  const n = Number(v);
  return v !== undefined && Number.isFinite(n) && n > 0 ? n : fallback;
}

/** The deadline of a request's reply, by op (none: the reply comes when a command ends, and the watchdog keeps watch). */
export function replyDeadline(body: Record<string, unknown>): number | undefined {
  const op = String(body.op);
  const timeout = typeof body.timeout_ms === "number" && body.timeout_ms > 0 ? body.timeout_ms : undefined;
  if (op === "proc.wait") return (timeout ?? 0) + AGENT_DEADLINE_MS;
  if (op === "exec" && body.mode === "buffer") return timeout === undefined ? undefined : timeout + AGENT_DEADLINE_MS;
  return SLOW_OP_DEADLINE_MS[op] ?? AGENT_DEADLINE_MS;
}

/** What a stream (an exec or a file transfer) receives from the guest. */
export interface StreamSink {
  onData?(channel: Channel, data: Buffer): void;
  onEof?(channel: Channel): void;
  onEvent?(event: Record<string, unknown>): void;
  /** The connection died; the stream will get nothing more. */
  onClose?(error: Error): void;
}

interface StreamState {
  sink: StreamSink;
  /** Bytes the guest may still send per channel (what we granted minus what arrived). */
  allowance: Map<Channel, number>;
  /** Bytes we may still send to the guest per channel, and who waits for more. */
  credit: Map<Channel, number>;
  creditWaiters: Array<() => void>;
}

interface PendingRequest {
  resolve: (v: Record<string, unknown>) => void;
  reject: (e: Error) => void;
  timer?: NodeJS.Timeout;
}

/**
 * One connection to a guest agent: typed requests, flow-controlled streams, and the
 * guards that keep a hostile guest from growing host memory (frame caps, credit checks).
 */
export class AgentClient {
  private socket!: net.Socket;
  private decoder = new FrameDecoder();
  private nextId = 1;
  private pending = new Map<number, PendingRequest>();
  private streams = new Map<number, StreamState>();
  private syncing: { nonce: Buffer; tail: Buffer; discarded: number } | undefined;
  private held: Buffer[] | undefined;
  private closeError: Error | undefined;
  private unsolicited = { left: UNSOLICITED_BURST, at: Date.now() };
  private closeListeners: Array<(e: Error) => void> = [];
  /** When the guest last sent anything (the watchdog's clock). */
  private heardAt = Date.now();
  private watchdog: NodeJS.Timeout | undefined;
  private pinging = false;
  hello!: HelloReply;

  /**
   * Connects to the agent socket, then says hello and waits for the SYNC marker.
   * `afterConnect` runs once the socket is connected and the hello queued: a restore
   * resumes the VM there, so the guest never sees the host side closed (see Launcher.restoreFrom).
   *
   * A hello that goes unanswered is retried on a fresh connection (with growing
   * patience): the guest then sees a clean close and reopen, which recovers from a
   * hello that crossed the guest's handling of a previous host's disconnect.
   * `first`: requests to send right behind the hello, before its answer (the guest takes them
   * in order), so their round trip overlaps the hello's; the connect waits for them too, and
   * fails if they fail. Sent again on each attempt.
   */
  static async connect(path: string, timeoutMs = 15_000, afterConnect?: () => Promise<void>, first?: (c: AgentClient) => Promise<unknown>): Promise<AgentClient> {
    const deadline = Date.now() + timeoutMs;
    let patience = FIRST_HELLO_PATIENCE_MS;
    for (let attempt = 0; ; attempt++) {
      const client = new AgentClient();
      const budget = Math.min(patience, deadline - Date.now());
      try {
        await client.open(path, Math.max(1, budget), attempt === 0 ? afterConnect : undefined, first);
        return client;
      } catch (e) {
        client.close();
        const helloTimeout = e instanceof DenError && e.code === "agent_unavailable" && /did not answer hello/.test(e.message);
        if (!helloTimeout || Date.now() >= deadline - 50) {
          throw helloTimeout ? new DenError("agent_unavailable", `agent did not answer hello within ${timeoutMs} ms (${attempt + 1} attempts)`) : e;
        }
        patience *= 2;
      }
    }
  }

  private async open(path: string, timeoutMs: number, afterConnect?: () => Promise<void>, first?: (c: AgentClient) => Promise<unknown>): Promise<void> {
    this.socket = await connectUnixRetry(path, timeoutMs, (why) => new DenError("agent_unavailable", `agent socket did not open: ${why}`));
    this.socket.on("data", (d: Buffer) => this.onBytes(d));
    this.socket.on("error", (e) => this.fail(new DenError("agent_unavailable", `agent connection: ${e.message}`)));
    this.socket.on("close", () => this.fail(new DenError("agent_unavailable", "agent connection closed")));
    const nonce = randomBytes(SYNC_NONCE_BYTES);
    this.syncing = { nonce, tail: Buffer.alloc(0), discarded: 0 };
    const timer = setTimeout(() => this.fail(new DenError("agent_unavailable", `agent did not answer hello within ${timeoutMs} ms`)), timeoutMs);
    try {
      const helloReply = this.request("sys.hello", { version: PROTOCOL_VERSION, session: nonce.toString("hex") });
      helloReply.catch(() => undefined);
      await afterConnect?.();
      const behind = first?.(this);
      behind?.catch(() => undefined);
      const hello = await helloReply;
      if (hello.protocol !== PROTOCOL_VERSION) throw new DenError("agent_protocol_error", `agent speaks protocol ${hello.protocol}, host ${PROTOCOL_VERSION}`);
      this.hello = hello;
      await behind;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Throws unless the guest's agent has `feature`. An agent baked into an older template (or
   * snapshot) lacks newer ops, and ignores request fields it does not know: without this
   * check an exec as `user` would run as root there.
   */
  requireFeature(feature: AgentFeature, what: string): void {
    if (Array.isArray(this.hello.features) && this.hello.features.includes(feature)) return;
    throw new DenError("invalid_state", `${what} needs a newer guest agent than this sandbox's (${String(this.hello.agent).slice(0, 64)}, without ${feature}): its template or snapshot predates it; rebuild the template and create the sandbox again`);
  }

  get closed(): boolean {
    return this.closeError !== undefined;
  }

  onClose(listener: (e: Error) => void): void {
    if (this.closeError) listener(this.closeError);
    else this.closeListeners.push(listener);
  }

  close(): void {
    this.fail(new DenError("agent_unavailable", "agent connection closed by host"));
  }

  /** Sends one request and resolves with the reply, or rejects with the agent's error. */
  request<Op extends AgentOp>(op: Op, args: AgentOps[Op]["req"], sink?: StreamSink): Promise<AgentOps[Op]["res"]> {
    return this.requestRaw({ op, ...args }, sink) as Promise<AgentOps[Op]["res"]>;
  }

  /**
   * Like request, for ops whose reply opens a stream; returns the stream id with the reply.
   * The reply has a deadline (`replyDeadline`, or `deadlineMs`; `Infinity` for none).
   */
  requestRaw(body: Record<string, unknown>, sink?: StreamSink, onId?: (id: number) => void, deadlineMs = replyDeadline(body)): Promise<Record<string, unknown>> {
    if (this.closeError) return Promise.reject(this.closeError);
    const id = this.nextId++;
    if (sink) {
      const allowance = new Map<Channel, number>();
      const window = typeof body.window === "number" ? body.window : 0;
      for (const ch of [Channel.Stdout, Channel.Stderr, Channel.File]) allowance.set(ch, window);
      this.streams.set(id, { sink, allowance, credit: new Map(), creditWaiters: [] });
    }
    onId?.(id);
    return new Promise((resolve, reject) => {
      const timer = deadlineMs !== undefined && Number.isFinite(deadlineMs)
        ? setTimeout(() => this.missed(id, String(body.op), deadlineMs), deadlineMs)
        : undefined;
      timer?.unref();
      this.pending.set(id, {
        timer,
        resolve: (res) => {
          const s = this.streams.get(id);
          if (s && typeof res.window === "number") {
            s.credit.set(Channel.Stdin, res.window);
            s.credit.set(Channel.File, res.window);
          }
          resolve(res);
        },
        reject: (e) => {
          this.streams.delete(id);
          reject(e);
        },
      });
      this.send(encodeJson(FrameType.Req, id, body));
      this.armWatchdog();
    });
  }

  /** A reply that did not come in time: that request fails; the connection stays (the watchdog judges it). */
  private missed(id: number, op: string, ms: number): void {
    const p = this.pending.get(id);
    if (!p) return;
    if (this.held) {
      // The VM is paused (a hibernation, a snapshot): its time does not count.
      p.timer = setTimeout(() => this.missed(id, op, ms), ms);
      p.timer.unref();
      return;
    }
    this.pending.delete(id);
    this.streams.delete(id);
    p.reject(new DenError("guest_unresponsive", `the guest agent did not answer ${op} within ${ms} ms`));
  }

  /**
   * While a request or stream waits on the guest, a silence of WATCHDOG_IDLE_MS sends a
   * ping; one unanswered within WATCHDOG_PING_MS closes the connection (a stopped or
   * wedged agent), so no stream or request waits on it forever.
   */
  private armWatchdog(): void {
    if (this.watchdog || this.closeError) return;
    this.watchdog = setInterval(() => {
      if (this.closeError || (this.pending.size === 0 && this.streams.size === 0)) {
        clearInterval(this.watchdog);
        this.watchdog = undefined;
        return;
      }
      if (this.pinging || this.held || Date.now() - this.heardAt < WATCHDOG_IDLE_MS) return;
      this.pinging = true;
      this.requestRaw({ op: "sys.ping" }, undefined, undefined, WATCHDOG_PING_MS).then(
        () => (this.pinging = false),
        (e: unknown) => {
          this.pinging = false;
          if (e instanceof DenError && e.code === "guest_unresponsive") {
            this.fail(new DenError("guest_unresponsive", `the guest agent answered nothing for ${Math.round((Date.now() - this.heardAt) / 1000)} s, not even a ping`));
          }
        },
      );
    }, WATCHDOG_IDLE_MS / 3);
    this.watchdog.unref();
  }

  /** Grants the guest `bytes` more on a guest->host channel of a stream. */
  grant(id: number, channel: Channel, bytes: number): void {
    const s = this.streams.get(id);
    if (!s || bytes <= 0 || this.closeError) return;
    s.allowance.set(channel, (s.allowance.get(channel) ?? 0) + bytes);
    this.send(encodeCredit(id, channel, bytes));
  }

  /** Sends bytes on a host->guest channel, waiting for the guest's credit as needed. */
  async write(id: number, channel: Channel, data: Buffer): Promise<void> {
    let off = 0;
    while (off < data.length) {
      const s = this.streams.get(id);
      if (!s) throw this.closeError ?? new DenError("invalid_state", "stream is closed");
      const credit = s.credit.get(channel) ?? 0;
      if (credit <= 0) {
        await new Promise<void>((r) => s.creditWaiters.push(r));
        continue;
      }
      const n = Math.min(credit, MAX_DATA_CHUNK, data.length - off);
      s.credit.set(channel, credit - n);
      this.send(encodeData(id, channel, data.subarray(off, off + n)));
      off += n;
    }
  }

  end(id: number, channel: Channel): void {
    if (this.streams.has(id)) this.send(encodeEof(id, channel));
  }

  /** Forgets a stream (its final frame arrived or its owner gave up). */
  release(id: number): void {
    const s = this.streams.get(id);
    if (!s) return;
    this.streams.delete(id);
    for (const w of s.creditWaiters) w();
  }

  /**
   * Asks the agent to confirm it has consumed everything sent so far, then holds every
   * further frame until `unhold()`: the guest's input has no partial frame while a
   * snapshot is taken.
   */
  async quiesce(timeoutMs = AGENT_DEADLINE_MS): Promise<void> {
    await this.requestRaw({ op: "sys.quiesce" }, undefined, undefined, timeoutMs);
    // Only a confirmed quiesce holds frames: a late reply after a timeout must not.
    this.held ??= [];
  }

  unhold(): void {
    const held = this.held;
    this.held = undefined;
    if (held && !this.closeError) for (const b of held) this.socket.write(b);
  }

  private send(frame: Buffer): void {
    if (this.closeError) return;
    if (this.held) this.held.push(frame);
    else this.socket.write(frame);
  }

  private onBytes(data: Buffer): void {
    if (this.closeError) return;
    this.heardAt = Date.now();
    if (this.syncing) {
      const rest = this.scanForSync(data);
      if (rest === undefined) return;
      data = rest;
    }
    let frames: Frame[];
    try {
      frames = this.decoder.push(data);
    } catch (e) {
      this.violation((e as Error).message);
      return;
    }
    for (const f of frames) {
      this.dispatch(f);
      if (this.closeError) return;
    }
  }

  /** Returns the bytes after SYNC+nonce once found, else undefined (still syncing). */
  private scanForSync(data: Buffer): Buffer | undefined {
    const s = this.syncing!;
    const marker = Buffer.concat([SYNC_MAGIC, s.nonce]);
    const hay = Buffer.concat([s.tail, data]);
    const at = hay.indexOf(marker);
    if (at >= 0) {
      this.syncing = undefined;
      return hay.subarray(at + marker.length);
    }
    s.discarded += data.length;
    if (s.discarded > MAX_SYNC_DISCARD) {
      this.violation("no SYNC marker from the guest");
      return undefined;
    }
    s.tail = Buffer.from(hay.subarray(Math.max(0, hay.length - marker.length + 1)));
    return undefined;
  }

  /** Takes `bytes` from the guest's allowance of unsolicited frames; false (and the connection gone) once it is spent. */
  private allowUnsolicited(bytes: number): boolean {
    const now = Date.now();
    const u = this.unsolicited;
    u.left = Math.min(UNSOLICITED_BURST, u.left + ((now - u.at) / 1000) * UNSOLICITED_PER_SECOND);
    u.at = now;
    u.left -= bytes;
    if (u.left >= 0) return true;
    this.violation("a flood of frames the host never asked for");
    return false;
  }

  private dispatch(f: Frame): void {
    if ((f.type === FrameType.Event || (f.type === FrameType.Res && !this.pending.has(f.id))) && !this.allowUnsolicited(f.payload.length + HEADER_BYTES)) return;
    switch (f.type) {
      case FrameType.Res: {
        const p = this.pending.get(f.id);
        if (!p) return;
        const body = parseJson(f.payload);
        if (!body) return this.violation("malformed RES"); // rejects p with the rest
        this.pending.delete(f.id);
        clearTimeout(p.timer);
        if (body.ok === true) p.resolve(body);
        else p.reject(guestError(body.code, body.message));
        return;
      }
      case FrameType.Event: {
        // An event of a stream we gave up on (or never had) is dropped unread: parsing a
        // guest's 1 MiB of JSON costs the event loop, and nobody wants it.
        const s = this.streams.get(f.id);
        if (!s?.sink.onEvent) return;
        const body = parseJson(f.payload);
        if (!body) return this.violation("malformed EVENT");
        s.sink.onEvent(body);
        return;
      }
      case FrameType.Data: {
        if (f.payload.length < 1) return this.violation("empty DATA");
        const ch = f.payload[0] as Channel;
        const bytes = f.payload.subarray(1);
        const s = this.streams.get(f.id);
        if (!s) return; // a stream we gave up on; its bytes were within the credit we granted
        const left = (s.allowance.get(ch) ?? 0) - bytes.length;
        if (left < 0) return this.violation(`guest exceeded its credit on stream ${f.id} channel ${ch}`);
        s.allowance.set(ch, left);
        s.sink.onData?.(ch, bytes);
        return;
      }
      case FrameType.Eof: {
        if (f.payload.length < 1) return this.violation("empty EOF");
        this.streams.get(f.id)?.sink.onEof?.(f.payload[0] as Channel);
        return;
      }
      case FrameType.Credit: {
        if (f.payload.length < 5) return this.violation("short CREDIT");
        const s = this.streams.get(f.id);
        if (!s) return;
        const ch = f.payload[0] as Channel;
        s.credit.set(ch, Math.min((s.credit.get(ch) ?? 0) + f.payload.readUInt32BE(1), 1 << 30));
        const waiters = s.creditWaiters.splice(0);
        for (const w of waiters) w();
        return;
      }
      default:
        this.violation(`unexpected frame type ${f.type}`);
    }
  }

  private violation(why: string): void {
    this.fail(new DenError("agent_protocol_error", `guest agent protocol violation: ${why}`));
  }

  private fail(e: Error): void {
    if (this.closeError) return;
    this.closeError = e;
    this.socket?.destroy();
    clearInterval(this.watchdog);
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(e);
    }
    this.pending.clear();
    const streams = [...this.streams.values()];
    this.streams.clear();
    for (const s of streams) {
      for (const w of s.creditWaiters) w();
      s.sink.onClose?.(e);
    }
    for (const l of this.closeListeners.splice(0)) l(e);
  }
}

/** A guest's error reply; a full guest disk is the caller's state (`disk_full`, 409), whichever agent version says it. */
export function guestError(code: unknown, message: unknown): DenError {
  if (code === "io_error" && typeof message === "string" && /No space left on device|ENOSPC/.test(message)) return new DenError("disk_full", `the sandbox's disk is full: ${message.slice(0, 1024)}`);
  return errorFromWire(code, message);
}

function parseJson(b: Buffer): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(b.toString("utf8"));
    return v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
