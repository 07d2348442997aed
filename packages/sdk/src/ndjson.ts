/**
 * Incremental NDJSON: one JSON value per `\n`-terminated line, parsed as the bytes arrive, with
 * a cap on the length of one line so a broken or hostile server cannot make the client buffer
 * without bound.
 */
import { concatBytes } from "./bytes.js";
import { InvalidResponseError } from "./errors.js";

/**
 * The default cap on one NDJSON line: 4 MiB.
 *
 * @example
 * ```ts
 * readNdjson(body, { maxLineBytes: 2 * DEFAULT_MAX_LINE_BYTES });
 * ```
 */
export const DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024;

/**
 * Options of {@link readNdjson}.
 *
 * @example
 * ```ts
 * const opts: NdjsonOptions = { maxLineBytes: 1 << 20 };
 * ```
 */
export interface NdjsonOptions {
  /** Longest line accepted, in bytes (without the newline). Default 4 MiB. */
  maxLineBytes?: number;
  /** The HTTP status to put on errors. Default 200. */
  status?: number;
}

/**
 * Yields the JSON value of every non-blank line of a byte stream. A final line without a
 * trailing newline is accepted. A line that is not JSON or is longer than the cap throws an
 * {@link InvalidResponseError}. Stopping the iteration early (`break`) cancels the stream,
 * which closes the HTTP response.
 *
 * @example
 * ```ts
 * const res = await fetch(url);
 * for await (const value of readNdjson(res.body!)) console.log(value);
 * ```
 */
export async function* readNdjson(body: ReadableStream<Uint8Array>, opts: NdjsonOptions = {}): AsyncGenerator<unknown, void, undefined> {
  const max = opts.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES;
  const status = opts.status ?? 200;
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let parts: Uint8Array[] = [];
  let pending = 0;
  const tooLong = () => new InvalidResponseError("invalid_response", `NDJSON line longer than ${max} bytes`, status);
  const parse = (line: Uint8Array): unknown => {
    const text = decoder.decode(line).trim();
    if (text === "") return undefined;
    try {
      return JSON.parse(text);
    } catch {
      throw new InvalidResponseError("invalid_response", `NDJSON line is not JSON: ${text.slice(0, 200)}`, status);
    }
  };
  let finished = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      let start = 0;
      for (;;) {
        const nl = value.indexOf(10, start);
        if (nl === -1) break;
        const piece = value.subarray(start, nl);
        if (pending + piece.length > max) throw tooLong();
        const line = pending ? concatBytes([...parts, piece]) : piece;
        parts = [];
        pending = 0;
        start = nl + 1;
        const v = parse(line);
        if (v !== undefined) yield v;
      }
      if (start < value.length) {
        const rest = value.subarray(start);
        pending += rest.length;
        if (pending > max) throw tooLong();
        parts.push(rest);
      }
    }
    finished = true;
    if (pending) {
      const v = parse(concatBytes(parts));
      if (v !== undefined) yield v;
    }
  } finally {
    // Early exit (break, throw in the consumer, a bad line): close the response body.
    if (!finished) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}
