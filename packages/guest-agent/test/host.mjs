// Minimal host side of the den guest-agent protocol, for testing the agent over a unix
// socket (`den-agent --socket PATH --no-cgroup`). Node >= 20, no dependencies.
import net from 'node:net';
import crypto from 'node:crypto';
import fs from 'node:fs';

export const T = { REQ: 1, RES: 2, EVENT: 3, DATA: 4, EOF: 5, CREDIT: 6 };
const MAGIC = Buffer.from('\0DENSYNC', 'latin1');

export class Host {
  constructor(sockPath) {
    this.path = sockPath;
    this.nextId = 1;
    this.pending = new Map();   // id -> {resolve}
    this.streams = new Map();   // id -> handler {data(ch,buf), eof(ch), event(obj)}
    this.violations = [];
  }

  listen() {
    try { fs.unlinkSync(this.path); } catch {}
    this.server = net.createServer((s) => this._onConn(s));
    this.connWaiters = [];
    return new Promise((r) => this.server.listen(this.path, r));
  }

  _onConn(s) {
    if (this.sock) this.sock.destroy();
    this.sock = s;
    this.buf = Buffer.alloc(0);
    this.synced = false;
    s.on('data', (d) => this._onData(d));
    s.on('error', () => {});
    const w = this.connWaiters; this.connWaiters = [];
    w.forEach((f) => f());
  }

  waitConn() {
    if (this.sock && !this.sock.destroyed) return Promise.resolve();
    return new Promise((r) => this.connWaiters.push(r));
  }

  disconnect() { if (this.sock) { this.sock.destroy(); this.sock = null; } }

  close() { this.disconnect(); this.server.close(); }

  async hello(session = crypto.randomBytes(16).toString('hex')) {
    await this.waitConn();
    this.session = session;
    this.synced = false;
    this.buf = Buffer.alloc(0);
    this.needle = Buffer.concat([MAGIC, Buffer.from(session, 'hex')]);
    return this.req('sys.hello', { version: 1, session });
  }

  _onData(d) {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    if (!this.synced) {
      if (!this.needle) { this.buf = Buffer.alloc(0); return; }
      const i = this.buf.indexOf(this.needle);
      if (i < 0) { this.buf = this.buf.subarray(Math.max(0, this.buf.length - 23)); return; }
      this.buf = this.buf.subarray(i + this.needle.length);
      this.synced = true;
    }
    while (this.buf.length >= 4) {
      const len = this.buf.readUInt32BE(0);
      if (len < 5 || len - 5 > 1048576) throw new Error('bad frame length ' + len);
      if (this.buf.length < 4 + len) break;
      const type = this.buf[4], id = this.buf.readUInt32BE(5);
      const p = this.buf.subarray(9, 4 + len);
      this.buf = this.buf.subarray(4 + len);
      this._frame(type, id, p);
    }
  }

  _frame(type, id, p) {
    if (type === T.RES) {
      const w = this.pending.get(id);
      if (!w) { this.violations.push('unexpected RES ' + id); return; }
      this.pending.delete(id);
      w.resolve(JSON.parse(p.toString()));
      return;
    }
    const h = this.streams.get(id);
    if (!h) { this.violations.push(`frame type ${type} for unknown stream ${id}`); return; }
    if (type === T.DATA) h.data(p[0], Buffer.from(p.subarray(1)));
    else if (type === T.EOF) h.eof(p[0]);
    else if (type === T.EVENT) h.event(JSON.parse(p.toString()));
    else if (type === T.CREDIT) h.credit?.(p[0], p.readUInt32BE(1));
    else this.violations.push('unexpected frame type ' + type);
  }

  send(type, id, payload) {
    const h = Buffer.alloc(9);
    h.writeUInt32BE(payload.length + 5, 0);
    h[4] = type;
    h.writeUInt32BE(id, 5);
    this.sock.write(Buffer.concat([h, payload]));
  }

  // Sends a REQ; `handler` (optional) receives the stream frames of this id.
  req(op, args = {}, handler) {
    const id = this.nextId++;
    if (handler) this.streams.set(id, handler);
    const p = new Promise((resolve) => this.pending.set(id, { resolve }));
    this.send(T.REQ, id, Buffer.from(JSON.stringify({ op, ...args })));
    p.id = id;
    return p;
  }

  data(id, ch, buf) { this.send(T.DATA, id, Buffer.concat([Buffer.from([ch]), buf])); }
  eof(id, ch) { this.send(T.EOF, id, Buffer.from([ch])); }
  credit(id, ch, n) { const b = Buffer.alloc(5); b[0] = ch; b.writeUInt32BE(n, 1); this.send(T.CREDIT, id, b); }

  // Runs a streamed exec. opts.window: initial credit; opts.grant(ch, n): how much credit
  // to grant back after receiving n bytes (default: all of it). Checks credit is respected.
  exec(args, opts = {}) {
    const window = args.window ?? 262144;
    const out = { 1: [], 2: [] }, eofs = [], avail = { 1: window, 2: window };
    let stdinCredit = 0;
    const st = { stdinWaiters: [] };
    let resolveExit;
    const exit = new Promise((r) => (resolveExit = r));
    const handler = {
      data: (ch, b) => {
        out[ch].push(b);
        avail[ch] -= b.length;
        if (avail[ch] < 0) this.violations.push(`credit exceeded on ch${ch}`);
        if (b.length > 65536) this.violations.push('DATA too large');
        opts.onData?.(ch, b);
        const g = opts.grant ? opts.grant(ch, b.length) : b.length;
        if (g) setTimeout(() => { avail[ch] += g; if (this.sock) this.credit(res.id, ch, g); }, opts.grantDelay ?? 0);
      },
      eof: (ch) => eofs.push(ch),
      credit: (ch, n) => { stdinCredit += n; st.stdinWaiters.splice(0).forEach((f) => f()); },
      event: (e) => {
        if (eofs.length < 2) this.violations.push('exit event before both EOFs');
        resolveExit({ event: e, stdout: Buffer.concat(out[1]), stderr: Buffer.concat(out[2]), eofs });
      },
    };
    const res = this.req('exec', { ...args, window }, handler);
    const r = { res, exit, id: res.id };
    res.then((x) => { if (x.window) stdinCredit = x.window; });
    // Writes stdin respecting credit.
    r.write = async (buf) => {
      await res;
      let off = 0;
      while (off < buf.length) {
        while (stdinCredit <= 0) await new Promise((f) => st.stdinWaiters.push(f));
        const n = Math.min(stdinCredit, 65536, buf.length - off);
        this.data(res.id, 0, buf.subarray(off, off + n));
        stdinCredit -= n;
        off += n;
      }
    };
    r.end = async () => { await res; this.eof(res.id, 0); };
    r.grant = (ch, n) => { avail[ch] += n; this.credit(res.id, ch, n); };
    return r;
  }

  // Opens a tcp.connect tunnel. Like exec: opts.grant(n) says how much credit to grant
  // back after receiving n bytes (default all), after opts.grantDelay ms; checks the
  // guest's credit is respected. r.write/r.end respect the guest's credit.
  tunnel(args, opts = {}) {
    const window = args.window ?? 262144;
    const chunks = [];
    let avail = window, credit = 0, received = 0;
    const waiters = [];
    const wake = () => waiters.splice(0).forEach((f) => f());
    const r = { frames: [], eof: false, closedEvent: undefined };
    let closedResolve;
    r.closed = new Promise((f) => (closedResolve = f));
    const handler = {
      data: (ch, b) => {
        r.frames.push('data');
        if (ch !== 1) this.violations.push(`tunnel DATA on ch${ch}`);
        if (r.eof) this.violations.push('tunnel DATA after EOF');
        chunks.push(b);
        received += b.length;
        avail -= b.length;
        if (avail < 0) this.violations.push('tunnel credit exceeded');
        if (b.length > 65536) this.violations.push('DATA too large');
        opts.onData?.(b);
        const g = opts.grant ? opts.grant(b.length) : b.length;
        if (g) setTimeout(() => { avail += g; if (this.sock && !r.closedEvent) this.credit(res.id, 1, g); }, opts.grantDelay ?? 0);
        wake();
      },
      eof: (ch) => {
        r.frames.push('eof');
        if (ch !== 1) this.violations.push(`tunnel EOF on ch${ch}`);
        r.eof = true;
        wake();
      },
      credit: (ch, n) => {
        if (ch !== 0) this.violations.push(`tunnel CREDIT on ch${ch}`);
        credit += n;
        wake();
      },
      event: (e) => {
        r.frames.push('event');
        if (e.event !== 'closed') this.violations.push('unexpected tunnel event ' + JSON.stringify(e));
        if (r.closedEvent) this.violations.push('second closed event');
        r.closedEvent = e;
        closedResolve(e);
        wake();
      },
    };
    const res = this.req('tcp.connect', { ...args, window }, handler);
    r.res = res;
    r.id = res.id;
    res.then((x) => { if (x.ok) { credit = x.window; wake(); } else this.streams.delete(res.id); });
    r.received = () => Buffer.concat(chunks);
    r.receivedBytes = () => received;
    // Resolves once at least n bytes arrived (or EOF / closed).
    r.waitBytes = async (n) => { while (received < n && !r.eof && !r.closedEvent) await new Promise((f) => waiters.push(f)); };
    r.waitEof = async () => { while (!r.eof && !r.closedEvent) await new Promise((f) => waiters.push(f)); };
    r.write = async (buf) => {
      await res;
      let off = 0;
      while (off < buf.length) {
        while (credit <= 0) {
          if (r.closedEvent) throw new Error('tunnel closed');
          await new Promise((f) => waiters.push(f));
        }
        const n = Math.min(credit, 65536, buf.length - off);
        this.data(res.id, 0, buf.subarray(off, off + n));
        credit -= n;
        off += n;
      }
    };
    r.end = async () => { await res; this.eof(res.id, 0); };
    r.grant = (n) => { avail += n; this.credit(res.id, 1, n); };
    return r;
  }
}
