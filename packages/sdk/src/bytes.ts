/** Byte helpers: base64 both ways, UTF-8, concatenation. Buffer when present (Node), else atob/btoa. */

const NodeBuffer = (globalThis as { Buffer?: typeof Buffer }).Buffer;
const encoder = new TextEncoder();

/** Base64 of some bytes. */
export function toBase64(bytes: Uint8Array): string {
  if (NodeBuffer) return NodeBuffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

/** The bytes of a base64 string (a plain Uint8Array, not a Buffer). */
export function fromBase64(b64: string): Uint8Array {
  if (NodeBuffer) {
    const b = NodeBuffer.from(b64, "base64");
    return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  }
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** UTF-8 bytes of a string, or the bytes themselves. */
export function toBytes(data: string | Uint8Array): Uint8Array {
  return typeof data === "string" ? encoder.encode(data) : data;
}

/** UTF-8 text of some bytes (invalid sequences become U+FFFD). */
export function utf8(bytes: Uint8Array): string {
  return new TextDecoder().decode(bytes);
}

/** One array holding all the parts, in order. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
