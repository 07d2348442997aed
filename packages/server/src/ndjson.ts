import { once } from "node:events";
import { PassThrough, type Readable } from "node:stream";

/** How often a silent NDJSON stream says it is alive (HTTP clients give up after minutes of silence). */
export const KEEPALIVE_MS = 15_000;
const KEEPALIVE_LINE = JSON.stringify({ type: "keepalive" }) + "\n";

/**
 * Serves lines from `source` as a stream, with a keepalive line after each quiet
 * `everyMs`. Stops pulling from `source` as soon as the client goes away.
 */
export function ndjsonStream(source: AsyncIterable<string>, everyMs = KEEPALIVE_MS): Readable {
  const out = new PassThrough();
  let closed = false;
  let last = Date.now();
  out.on("close", () => (closed = true));
  const timer = setInterval(() => {
    if (!closed && Date.now() - last >= everyMs) {
      last = Date.now();
      out.write(KEEPALIVE_LINE);
    }
  }, Math.min(everyMs, 1000));
  void (async () => {
    try {
      for await (const line of source) {
        if (closed) break;
        last = Date.now();
        if (!out.write(line)) await Promise.race([once(out, "drain"), once(out, "close")]);
      }
    } catch {
      // the source reports its own errors as lines
    } finally {
      clearInterval(timer);
      if (!closed) out.end();
    }
  })();
  return out;
}
