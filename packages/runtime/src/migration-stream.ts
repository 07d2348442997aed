import { open, type FileHandle } from "node:fs/promises";

/**
 * QEMU 7.2's migration stream, read only as far as guest RAM goes (migration/savevm.c and
 * ram.c): a sandbox's RAM is restored over its template's RAM file mapped copy-on-write, so a
 * page the stream does not carry stays the template's. `keepChangedPages` drops from a saved
 * state every page of the guest's RAM block that equals the template's page at its offset (and
 * every zero page where the template's is zero too): the state holds what the sandbox changed,
 * and loading it makes only those pages private. Whatever it does not understand (a section it
 * does not know, a page encoding it never expects) it passes on unchanged from there on: the
 * result is always a stream QEMU loads into the same memory as the original.
 */

const FILE_MAGIC = 0x5145564d;
const SECTION_START = 0x01;
const SECTION_PART = 0x02;
const SECTION_END = 0x03;
/** QEMU_VM_COMMAND: QEMU 10 sends MIG_CMD_SWITCHOVER_START (11, no payload) between RAM parts. */
const COMMAND = 0x08;
const CMD_SWITCHOVER_START = 11;
const SUBSECTION = 0x05;
const CONFIGURATION = 0x07;
const SECTION_FOOTER = 0x7e;

const FLAG_ZERO = 0x02;
const FLAG_MEM_SIZE = 0x04;
const FLAG_PAGE = 0x08;
const FLAG_EOS = 0x10;
const FLAG_CONTINUE = 0x20;
const FLAG_MASK = 0xfff;
/** Encodings a stream with Den's capabilities never has (XBZRLE, RDMA hook, compressed pages, ...). */
const FLAG_UNEXPECTED = ~(FLAG_ZERO | FLAG_PAGE | FLAG_EOS | FLAG_CONTINUE) & FLAG_MASK;

export const PAGE_SIZE = 4096;

export interface PageFilterStats {
  /** Pages of the guest's RAM block the stream carried. */
  pages: number;
  /** Of those, pages kept (they differ from the template's). */
  kept: number;
  /** Whether the filter gave up on something it did not understand (the rest passed unchanged). */
  passedThrough: boolean;
  bytesIn: number;
  bytesOut: number;
}

/** Thrown inside the parser when the stream holds something it does not know: pass the rest on. */
class Unknown extends Error {}

/** Pulls exact byte counts off a chunk stream, remembering what it consumed but not yet sent on. */
class Reader {
  private chunks: Buffer[] = [];
  private have = 0;
  private done = false;
  /** Bytes consumed since the last `take()`: passed on as they are if the parse gives up. */
  consumed: Buffer[] = [];

  constructor(private readonly source: AsyncIterator<Buffer>) {}

  private async fill(n: number): Promise<boolean> {
    while (this.have < n && !this.done) {
      const r = await this.source.next();
      if (r.done) this.done = true;
      else if (r.value.length) {
        this.chunks.push(r.value);
        this.have += r.value.length;
      }
    }
    return this.have >= n;
  }

  /** Bytes buffered: a caller that checked this may use the sync reads. */
  get buffered(): number {
    return this.have;
  }

  async read(n: number): Promise<Buffer> {
    if (this.have < n && !(await this.fill(n))) throw new Unknown("the stream ended early");
    return this.readSync(n);
  }

  /** Pulls in at least `n` bytes if the stream has them; false at its end. */
  async want(n: number): Promise<boolean> {
    return this.have >= n || this.fill(n);
  }

  readSync(n: number): Buffer {
    if (this.have < n) throw new Unknown("the stream ended early");
    let out: Buffer;
    const first = this.chunks[0]!;
    if (first.length >= n) {
      out = first.subarray(0, n);
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
    } else {
      out = Buffer.allocUnsafe(n);
      let at = 0;
      while (at < n) {
        const c = this.chunks[0]!;
        const k = Math.min(c.length, n - at);
        c.copy(out, at, 0, k);
        at += k;
        if (k === c.length) this.chunks.shift();
        else this.chunks[0] = c.subarray(k);
      }
    }
    this.have -= n;
    this.consumed.push(out);
    return out;
  }

  /** The first buffered chunk, for a caller that parses in place (then `skipSync`). */
  head(): Buffer | undefined {
    return this.chunks[0];
  }

  /** Drops `n` bytes of the first chunk, which the caller has parsed and sent on itself. */
  skipSync(n: number): void {
    const first = this.chunks[0]!;
    if (n === first.length) this.chunks.shift();
    else this.chunks[0] = first.subarray(n);
    this.have -= n;
  }

  async peek(): Promise<number | undefined> {
    if (!(await this.fill(1))) return undefined;
    return this.chunks[0]![0];
  }

  async u8(): Promise<number> { return (await this.read(1))[0]!; }
  u8Sync(): number { return this.readSync(1)[0]!; }
  strSync(): string { return this.readSync(this.u8Sync()).toString("latin1"); }
  async be32(): Promise<number> { return (await this.read(4)).readUInt32BE(0); }
  async be64(): Promise<bigint> { return (await this.read(8)).readBigUInt64BE(0); }
  async str(): Promise<string> { return (await this.read(await this.u8())).toString("latin1"); }

  /** Forgets what was consumed (the caller has sent it on, or rewritten it). */
  take(): Buffer[] {
    const c = this.consumed;
    this.consumed = [];
    return c;
  }

  /** Everything not yet read. */
  async *rest(): AsyncGenerator<Buffer> {
    for (const c of this.chunks) yield c;
    this.chunks = [];
    for (;;) {
      const r = await this.source.next();
      if (r.done) return;
      yield r.value;
    }
  }
}

/**
 * Which pages of a template's RAM file are all zero, learnt window by window as streams ask
 * and kept for the process's life (templates are immutable; a file of another size or mtime
 * is another template): most of a guest's pages are zero in the stream and in the template,
 * and this answers for them without reading or comparing a byte.
 */
interface ZeroMap { size: number; mtimeMs: number; zero: Uint8Array; known: Uint8Array }
const zeroMaps = new Map<string, ZeroMap>();
const ZERO_WINDOW = Buffer.alloc(4 << 20);

/** The template's RAM file, read in windows as the stream's pages (mostly in order) ask for them. */
class BasePages {
  private window = Buffer.alloc(0);
  private windowAt = -1;
  static readonly WINDOW = 4 << 20;

  private constructor(private readonly fh: FileHandle, readonly size: number, private readonly zeros: ZeroMap) {}

  static async open(path: string): Promise<BasePages> {
    const fh = await open(path, "r");
    const st = await fh.stat();
    let zeros = zeroMaps.get(path);
    if (!zeros || zeros.size !== st.size || zeros.mtimeMs !== st.mtimeMs) {
      const pages = Math.ceil(st.size / PAGE_SIZE);
      zeros = { size: st.size, mtimeMs: st.mtimeMs, zero: new Uint8Array(Math.ceil(pages / 8)), known: new Uint8Array(Math.ceil(st.size / BasePages.WINDOW)) };
      if (zeroMaps.size >= 64) zeroMaps.clear();
      zeroMaps.set(path, zeros);
    }
    return new BasePages(fh, st.size, zeros);
  }

  /** Whether the template's page at `offset` is all zero; null when its window was never read. */
  isZero(offset: number): boolean | null {
    if (offset < 0 || offset + PAGE_SIZE > this.size) return false;
    if (!this.zeros.known[Math.floor(offset / BasePages.WINDOW)]) return null;
    const p = offset / PAGE_SIZE;
    return (this.zeros.zero[p >> 3]! & (1 << (p & 7))) !== 0;
  }

  /** The page at `offset` if the current window holds it (no I/O); null if it must be loaded. */
  cached(offset: number): Buffer | undefined | null {
    if (offset < 0 || offset + PAGE_SIZE > this.size) return undefined;
    const at = offset - (offset % BasePages.WINDOW);
    return at === this.windowAt ? this.window.subarray(offset - at, offset - at + PAGE_SIZE) : null;
  }

  async page(offset: number): Promise<Buffer | undefined> {
    if (offset < 0 || offset + PAGE_SIZE > this.size) return undefined;
    const at = offset - (offset % BasePages.WINDOW);
    if (at !== this.windowAt) {
      const len = Math.min(BasePages.WINDOW, this.size - at);
      if (this.window.length !== BasePages.WINDOW) this.window = Buffer.allocUnsafe(BasePages.WINDOW);
      const { bytesRead } = await this.fh.read(this.window, 0, len, at);
      if (bytesRead !== len) return undefined;
      this.windowAt = at;
      this.learnZeros(at, len);
    }
    return this.window.subarray(offset - at, offset - at + PAGE_SIZE);
  }

  /** Notes which pages of the window just read are zero (a whole zero window in one compare). */
  private learnZeros(at: number, len: number): void {
    const w = Math.floor(at / BasePages.WINDOW);
    if (this.zeros.known[w] || len % PAGE_SIZE) return;
    const first = at / PAGE_SIZE;
    const all = len === ZERO_WINDOW.length && this.window.equals(ZERO_WINDOW);
    for (let i = 0; i < len / PAGE_SIZE; i++) {
      if (all || this.window.subarray(i * PAGE_SIZE, (i + 1) * PAGE_SIZE).equals(ZERO_WINDOW.subarray(0, PAGE_SIZE))) {
        const p = first + i;
        this.zeros.zero[p >> 3]! |= 1 << (p & 7);
      }
    }
    this.zeros.known[w] = 1;
  }

  close(): Promise<void> {
    return this.fh.close();
  }
}

/**
 * A migration stream without the pages of RAM block `block` that equal the template's RAM
 * file `baseRam` at their offset. `stats` is filled in as it goes. `changed`: which pages
 * the guest changed, when the kernel could say (pagemap.ts): the rest go unread and uncompared.
 */
export async function* keepChangedPages(source: AsyncIterable<Buffer>, baseRam: string, stats: PageFilterStats, block = "ram", changed?: Uint8Array): AsyncGenerator<Buffer> {
  const base = await BasePages.open(baseRam);
  const counted = async function* () {
    for await (const c of source) {
      stats.bytesIn += c.length;
      yield c;
    }
  };
  const r = new Reader(counted());
  const out: Buffer[] = [];
  let outBytes = 0;
  const emit = (bufs: Buffer[]) => {
    for (const b of bufs) {
      out.push(b);
      outBytes += b.length;
    }
  };
  const flush = (): Buffer => {
    const b = Buffer.concat(out, outBytes);
    out.length = 0;
    outBytes = 0;
    stats.bytesOut += b.length;
    return b;
  };
  /** The block the loader will take a CONTINUE page for: the last one the output named. */
  let lastEmittedBlock: string | undefined;
  /** The block the source's CONTINUE pages mean: the last one the input named. */
  let lastReadBlock: string | undefined;
  let ramSection: number | undefined;
  let ignoreShared = false;

  /** Longest RAM record: header, block name, page. */
  const MAX_RECORD = 8 + 1 + 255 + PAGE_SIZE;

  /**
   * Whether a page of block `name` at `offset` (in `buf` at `at`) equals the template's, so it
   * can go (a zero page over a zero page included); null when its template window is not read yet.
   */
  const sameAsTemplate = (name: string, flags: number, offset: number, buf: Buffer, at: number): boolean | null => {
    if (name !== block) return false;
    if (changed) {
      // The kernel said which pages the guest wrote (pagemap.ts): no byte of the template read.
      const p = offset / PAGE_SIZE;
      return Number.isInteger(p) && p >> 3 < changed.length && (changed[p >> 3]! & (1 << (p & 7))) === 0;
    }
    if (flags & FLAG_ZERO) {
      const zero = base.isZero(offset);
      return zero === null ? null : buf[at] === 0 && zero;
    }
    const mine = base.cached(offset);
    if (mine === null) return null;
    return mine !== undefined && buf.compare(mine, 0, PAGE_SIZE, at, at + PAGE_SIZE) === 0;
  };
  const count = (name: string, drop: boolean) => {
    if (name !== block) return;
    stats.pages++;
    if (!drop) stats.kept++;
  };
  /** A record that names its block itself (the header re-encoded without CONTINUE). */
  const naming = (hi: number, lo: number, name: string, body: Buffer): Buffer[] => {
    const h = Buffer.allocUnsafe(8);
    h.writeUInt32BE(hi, 0);
    h.writeUInt32BE((lo & ~FLAG_CONTINUE) >>> 0, 4);
    const n = Buffer.from(name, "latin1");
    return [h, Buffer.from([n.length]), n, body];
  };

  /**
   * The records wholly inside the first buffered chunk, parsed in place: a run of records
   * that pass unchanged goes on as one slice of the chunk (no copy, no object per page).
   * Stops at anything the record-at-a-time path must handle (EOS, a surprise, a template
   * window not yet read); returns the bytes it consumed.
   */
  const inPlace = (c: Buffer): number => {
    let pos = 0;
    let run = -1;
    const endRun = () => {
      if (run >= 0) emit([c.subarray(run, pos)]);
      run = -1;
    };
    while (c.length - pos >= MAX_RECORD) {
      const hi = c.readUInt32BE(pos);
      const lo = c.readUInt32BE(pos + 4);
      const flags = lo & FLAG_MASK;
      if (flags & (FLAG_UNEXPECTED | FLAG_EOS) || !(flags & (FLAG_PAGE | FLAG_ZERO))) break;
      const offset = hi * 2 ** 32 + ((lo & ~FLAG_MASK) >>> 0);
      let at = pos + 8;
      let name = lastReadBlock;
      if (!(flags & FLAG_CONTINUE)) {
        const len = c[at]!;
        name = c.toString("latin1", at + 1, at + 1 + len);
        at += 1 + len;
      }
      if (name === undefined) break;
      const end = at + (flags & FLAG_PAGE ? PAGE_SIZE : 1);
      const drop = sameAsTemplate(name, flags, offset, c, at);
      if (drop === null) break;
      count(name, drop);
      lastReadBlock = name;
      if (drop) endRun();
      else if (!(flags & FLAG_CONTINUE) || name === lastEmittedBlock) {
        // Its header holds as it is: it names its block, or continues the one the output named last.
        if (run < 0) run = pos;
        lastEmittedBlock = name;
      } else {
        // It continues a block whose naming record was dropped: it names the block itself.
        endRun();
        emit(naming(hi, lo, name, c.subarray(at, end)));
        lastEmittedBlock = name;
      }
      pos = end;
    }
    endRun();
    return pos;
  };

  /**
   * RAM records up to and including EOS, each page kept or dropped, headers rewritten so
   * CONTINUE stays true. A record is parsed with sync reads once it is buffered whole (this
   * runs while the VM is paused: no await per page).
   */
  const ramRecords = async function* (): AsyncGenerator<Buffer> {
    for (;;) {
      if (outBytes >= 1 << 20) yield flush();
      if (r.buffered < MAX_RECORD) await r.want(MAX_RECORD);
      const chunk = r.head();
      if (chunk && chunk.length >= MAX_RECORD) {
        const used = inPlace(chunk);
        if (used > 0) {
          r.skipSync(used);
          continue;
        }
      }
      const head = r.readSync(8);
      const hi = head.readUInt32BE(0);
      const lo = head.readUInt32BE(4);
      const flags = lo & FLAG_MASK;
      const offset = hi * 2 ** 32 + ((lo & ~FLAG_MASK) >>> 0);
      if (flags & FLAG_UNEXPECTED) throw new Unknown(`RAM flags ${flags.toString(16)}`);
      if (flags & FLAG_EOS) {
        if (flags & ~FLAG_EOS) throw new Unknown("EOS with other flags");
        emit(r.take());
        return;
      }
      if (!(flags & (FLAG_PAGE | FLAG_ZERO))) throw new Unknown(`a RAM record without a page (flags ${flags.toString(16)})`);
      if (!(flags & FLAG_CONTINUE)) lastReadBlock = r.strSync();
      const name = lastReadBlock;
      if (name === undefined) throw new Unknown("a CONTINUE page before any block");
      const body = flags & FLAG_PAGE ? r.readSync(PAGE_SIZE) : r.readSync(1);
      let drop = sameAsTemplate(name, flags, offset, body, 0);
      if (drop === null) {
        // Its template window is read once; the zero pages in it are known from then on.
        await base.page(offset);
        drop = sameAsTemplate(name, flags, offset, body, 0) === true;
      }
      count(name, drop);
      r.take();
      if (drop) continue;
      // Re-encode the header: the pages dropped in between may have named other blocks.
      if (name === lastEmittedBlock) {
        const h = Buffer.allocUnsafe(8);
        h.writeUInt32BE(hi, 0);
        h.writeUInt32BE((lo | FLAG_CONTINUE) >>> 0, 4);
        emit([h, body]);
      } else {
        emit(naming(hi, lo, name, body));
        lastEmittedBlock = name;
      }
    }
  };

  const footer = async (section: number): Promise<void> => {
    if ((await r.peek()) !== SECTION_FOOTER) return;
    await r.u8();
    if ((await r.be32()) !== section) throw new Unknown("a footer for another section");
    emit(r.take());
  };

  try {
    try {
      if ((await r.be32()) !== FILE_MAGIC) throw new Unknown("not a QEMU migration stream");
      if ((await r.be32()) !== 3) throw new Unknown("stream version");
      if ((await r.peek()) === CONFIGURATION) {
        await r.u8();
        await r.read(await r.be32()); // machine type
        while ((await r.peek()) === SUBSECTION) {
          await r.u8();
          const name = await r.str();
          await r.be32(); // version
          if (name === "configuration/capabilities") {
            const caps: string[] = [];
            for (let n = await r.be32(); n > 0; n--) caps.push(await r.str());
            // Capabilities that change how RAM is laid out in the stream, beyond what this parser reads.
            if (caps.some((c) => c !== "x-ignore-shared")) throw new Unknown(`capabilities ${caps.join(",")}`);
            ignoreShared = caps.includes("x-ignore-shared");
          } else if (name === "configuration/target-page-bits") {
            if ((await r.be32()) !== 12) throw new Unknown("target page size");
          } else throw new Unknown(`configuration subsection ${name}`);
        }
      }
      emit(r.take());
      for (;;) {
        const type = await r.peek();
        if (type === SECTION_START) {
          await r.u8();
          const id = await r.be32();
          const name = await r.str();
          await r.be32(); // instance
          await r.be32(); // version
          if (name !== "ram" || ramSection !== undefined) throw new Unknown(`section ${name}`);
          ramSection = id;
          const total = await r.be64();
          if (!(Number(total & BigInt(FLAG_MASK)) & FLAG_MEM_SIZE)) throw new Unknown("RAM setup without sizes");
          let left = total & ~BigInt(FLAG_MASK);
          while (left > 0n) {
            const blockName = await r.str();
            const length = await r.be64();
            if (ignoreShared) await r.be64(); // its guest address
            if (blockName === block && Number(length) !== base.size) throw new Unknown(`block ${block} is ${length} bytes, the template's RAM ${base.size}`);
            left -= length;
          }
          emit(r.take());
          yield* ramRecords();
          await footer(id);
        } else if ((type === SECTION_PART || type === SECTION_END) && ramSection !== undefined) {
          await r.u8();
          if ((await r.be32()) !== ramSection) throw new Unknown("a part of another section");
          emit(r.take());
          yield* ramRecords();
          await footer(ramSection);
        } else if (type === COMMAND && ramSection !== undefined) {
          await r.u8();
          // Only the one command known to carry nothing the RAM's layout depends on: its number and an empty payload.
          if ((await r.be32()) !== CMD_SWITCHOVER_START << 16) throw new Unknown("a command in the stream");
          emit(r.take());
        } else {
          // Devices' full sections (and EOF) follow the last RAM: nothing more to filter.
          throw new Unknown("past RAM");
        }
        if (outBytes >= 1 << 20) yield flush();
      }
    } catch (e) {
      if (!(e instanceof Unknown)) throw e;
      if (e.message !== "past RAM") {
        // Once a page is gone, a CONTINUE record passed on as it is may name the wrong block.
        if (stats.pages > stats.kept) throw new Error(`the migration stream cannot be filtered past this point: ${e.message}`);
        stats.passedThrough = true;
      }
      emit(r.take());
    }
    if (outBytes) yield flush();
    for await (const c of r.rest()) {
      stats.bytesOut += c.length;
      yield c;
    }
  } finally {
    await base.close();
  }
}
