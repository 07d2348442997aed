/**
 * The framed wire format between host and guest agent (see PROTOCOL.md).
 * Frame: u32 BE length (of type+id+payload), u8 type, u32 BE id, payload.
 */
export const PROTOCOL_VERSION = 1;
export const MAX_PAYLOAD = 1 << 20;
export const MAX_DATA_CHUNK = 64 * 1024;
export const HEADER_BYTES = 9;
export const SYNC_MAGIC = Buffer.from("\0DENSYNC", "latin1");
export const SYNC_NONCE_BYTES = 16;

export enum FrameType {
  Req = 1,
  Res = 2,
  Event = 3,
  Data = 4,
  Eof = 5,
  Credit = 6,
}

export enum Channel {
  Stdin = 0,
  Stdout = 1,
  Stderr = 2,
  File = 3,
}

export interface Frame {
  type: FrameType;
  id: number;
  payload: Buffer;
}

export function encodeFrame(type: FrameType, id: number, payload: Buffer): Buffer {
  if (payload.length > MAX_PAYLOAD) throw new RangeError(`frame payload ${payload.length} exceeds ${MAX_PAYLOAD}`);
  const head = Buffer.allocUnsafe(HEADER_BYTES);
  head.writeUInt32BE(payload.length + 5, 0);
  head.writeUInt8(type, 4);
  head.writeUInt32BE(id >>> 0, 5);
  return Buffer.concat([head, payload]);
}

export function encodeJson(type: FrameType.Req | FrameType.Res | FrameType.Event, id: number, body: unknown): Buffer {
  return encodeFrame(type, id, Buffer.from(JSON.stringify(body), "utf8"));
}

export function encodeData(id: number, channel: Channel, bytes: Buffer): Buffer {
  return encodeFrame(FrameType.Data, id, Buffer.concat([Buffer.of(channel), bytes]));
}

export function encodeEof(id: number, channel: Channel): Buffer {
  return encodeFrame(FrameType.Eof, id, Buffer.of(channel));
}

export function encodeCredit(id: number, channel: Channel, bytes: number): Buffer {
  const p = Buffer.allocUnsafe(5);
  p.writeUInt8(channel, 0);
  p.writeUInt32BE(bytes >>> 0, 1);
  return encodeFrame(FrameType.Credit, id, p);
}

export class FrameError extends Error {}

/**
 * Incremental frame parser for bytes from an untrusted peer. Holds at most one frame
 * (MAX_PAYLOAD + header) of buffered input; a bigger length or an unknown type throws
 * FrameError and the caller drops the connection.
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;

  push(data: Buffer): Frame[] {
    this.chunks.push(data);
    this.buffered += data.length;
    const frames: Frame[] = [];
    for (;;) {
      if (this.buffered < 4) break;
      const head = this.peek(Math.min(this.buffered, HEADER_BYTES));
      const length = head.readUInt32BE(0);
      if (length < 5 || length - 5 > MAX_PAYLOAD) throw new FrameError(`bad frame length ${length}`);
      if (this.buffered < 4 + length) break;
      const whole = this.take(4 + length);
      const type = whole.readUInt8(4);
      if (!(type in FrameType) || typeof FrameType[type] !== "string") throw new FrameError(`unknown frame type ${type}`);
      frames.push({ type, id: whole.readUInt32BE(5), payload: whole.subarray(HEADER_BYTES) });
    }
    return frames;
  }

  get pendingBytes(): number {
    return this.buffered;
  }

  private peek(n: number): Buffer {
    if (this.chunks[0]!.length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0]!.subarray(0, n);
  }

  private take(n: number): Buffer {
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.chunks = rest.length ? [rest] : [];
    this.buffered = rest.length;
    return out;
  }
}
