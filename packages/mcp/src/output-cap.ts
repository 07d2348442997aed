/**
 * One output stream of a command, bounded: it keeps the first half of its budget and the
 * last half (a build's first error and its summary are both worth seeing), drops the middle
 * of a longer output, and says how much it dropped. Memory stays within the budget whatever
 * the command prints.
 */
export class OutputCap {
  readonly #headMax: number;
  readonly #tailMax: number;
  readonly #head: Uint8Array[] = [];
  #headLen = 0;
  /** The newest bytes past the head, oldest first; trimmed from the front to `tailMax`. */
  #tail: Uint8Array[] = [];
  #tailLen = 0;
  /** Every byte the stream produced, kept or not. */
  total = 0;

  constructor(maxBytes: number) {
    this.#headMax = Math.ceil(maxBytes / 2);
    this.#tailMax = maxBytes - this.#headMax;
  }

  push(chunk: Uint8Array): void {
    this.total += chunk.length;
    let rest = chunk;
    if (this.#headLen < this.#headMax) {
      const take = rest.subarray(0, this.#headMax - this.#headLen);
      this.#head.push(take);
      this.#headLen += take.length;
      rest = rest.subarray(take.length);
    }
    if (!rest.length) return;
    // Copy: a subarray would keep the whole (possibly large) chunk alive.
    this.#tail.push(rest.length > this.#tailMax ? rest.slice(rest.length - this.#tailMax) : rest.slice());
    this.#tailLen += Math.min(rest.length, this.#tailMax);
    while (this.#tailLen > this.#tailMax) {
      const first = this.#tail[0]!;
      const over = this.#tailLen - this.#tailMax;
      if (first.length <= over) {
        this.#tail.shift();
        this.#tailLen -= first.length;
      } else {
        this.#tail[0] = first.subarray(over);
        this.#tailLen -= over;
      }
    }
  }

  /** Bytes dropped from the middle (0 when everything was kept). */
  get dropped(): number {
    return this.total - this.#headLen - this.#tailLen;
  }

  /** The kept output as text, with a marker where bytes were dropped. */
  text(): string {
    // Decoded together when nothing was dropped: a character may straddle the two.
    if (!this.dropped) return decode([...this.#head, ...this.#tail]);
    return `${decode(this.#head)}\n[... ${this.dropped} bytes of ${this.total} dropped here: output over the ${this.#headMax + this.#tailMax}-byte cap ...]\n${decode(this.#tail)}`;
  }
}

function decode(parts: Uint8Array[]): string {
  return Buffer.concat(parts).toString("utf8");
}
