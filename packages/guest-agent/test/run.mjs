// End-to-end tests of den-agent in host test mode. Usage:
//   OUT=/tmp/den-agent ../build.sh && node run.mjs /tmp/den-agent [filter]
import { spawn, execFileSync, execSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { Host, T } from './host.mjs';

const agentBin = process.argv[2] || '/tmp/den-agent';
const filter = process.argv[3];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'den-test-'));
const sock = path.join(dir, 'agent.sock');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const b64 = (s) => Buffer.from(s).toString('base64');
// Zombies count as dead (the host's PID 1 may reap lazily).
const alive = (pid) => { try { return !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return false; } };

const host = new Host(sock);
await host.listen();
const wrap = process.env.VALGRIND ? ['valgrind', '--leak-check=full', '--error-exitcode=9', '--track-origins=yes', '--trace-children=no', '--log-file=' + dir + '/vg.log'] : [];
const agent = spawn(wrap[0] || agentBin, [...wrap.slice(1), ...(wrap.length ? [agentBin] : []), '--socket', sock, ...(process.env.CGROUP ? [] : ['--no-cgroup'])], { stdio: ['ignore', 'inherit', 'inherit'] });
const agentPid = () => agent.pid;
const tests = [];
const test = (name, fn) => tests.push({ name, fn });

function cpuTicks(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return Number(f[11]) + Number(f[12]);
}
function rssKb(pid, key = 'VmRSS') {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(new RegExp(key + ':\\s+(\\d+)'));
  return Number(m[1]);
}
// Under valgrind the agent is a child of valgrind's process: find the real pid.
function realAgentPid() {
  return agent.pid;
}

test('hello', async () => {
  const r = await host.hello();
  assert.equal(r.ok, true);
  assert.equal(r.protocol, 1);
  assert.match(r.boot_id, /^[0-9a-f-]{36}$/);
  assert.ok(r.pid > 0);
  assert.deepEqual(await host.req('sys.ping'), { ok: true });
  assert.equal((await host.req('nope')).code, 'unknown_op');
  const info = await host.req('sys.info');
  assert.ok(info.mem_total_kb > 0 && info.uptime_ms > 0);
  assert.deepEqual(r.features, ['exec.user', 'file.owner', 'file.xattr', 'sys.metrics', 'volumes']);
});

// (On the host there are no volume slots: only the refusals and the no-ops can be seen here.)
test('vol.*: bad slots and mount points are refused; nothing not a volume is ever unmounted', async () => {
  for (const p of ['/etc', '/usr/local/x', '/', '/proc', '/a/../b', '/a/./b', '/trailing/', '/with space', 'relative']) {
    assert.equal((await host.req('vol.mount', { slot: 0, path: p, read_only: false })).code, 'invalid_argument', p);
  }
  assert.equal((await host.req('vol.mount', { slot: 99, path: '/data', read_only: false })).code, 'invalid_argument');
  const missing = path.join(os.tmpdir(), `den-vol-test-${process.pid}`);
  const r = await host.req('vol.mount', { slot: 3, path: missing, read_only: true });
  assert.equal(r.ok, false, 'no slot device here');
  assert.equal(fs.existsSync(missing), false, 'nothing is made for a mount that cannot happen');
  // /proc is mounted, but it is not a volume: release and detach leave it alone.
  assert.deepEqual(await host.req('vol.release', { path: '/proc' }), { ok: true, released: true });
  assert.deepEqual(await host.req('vol.detach', { slot: 0, path: '/proc' }), { ok: true, free: false });
  assert.ok(fs.existsSync('/proc/self/status'), '/proc is still mounted');
});

test('net.setup: bad arguments are refused before any interface is touched; a missing device is an error', async () => {
  const ok = { dev: 'den-none0', mac: '02:00:00:00:00:01', address: '10.0.2.15', prefix: 24, gateway: '10.0.2.2', dns: '10.0.2.3' };
  for (const bad of [{ mac: '02:00:00:00:00' }, { mac: 'zz:00:00:00:00:01' }, { address: '10.0.2' }, { prefix: 0 }, { prefix: 31 }, { gateway: 'x' }, { dns: '' }, { dev: 'a-name-too-long-for-ifnamsiz' }]) {
    const r = await host.req('net.setup', { ...ok, ...bad });
    assert.equal(r.code, 'invalid_argument', JSON.stringify(bad));
  }
  // (A device this host does not have: the first ioctl fails, so nothing of the host's networking changes.)
  const r = await host.req('net.setup', ok);
  assert.equal(r.ok, false);
  assert.match(r.message, /down/);
});

test('exec exit 42', async () => {
  const e = host.exec({ cmd: 'exit 42' });
  const res = await e.res;
  assert.equal(res.ok, true);
  const x = await e.exit;
  assert.deepEqual(x.event, { event: 'exit', proc: res.proc, exit_code: 42, signal: null, timed_out: false });
  assert.deepEqual(x.eofs.sort(), [1, 2]);
});

test('exec errors', async () => {
  assert.equal((await host.req('exec', { argv: ['/nonexistent/bin'] })).code, 'not_found');
  assert.equal((await host.req('exec', { argv: ['true'], cwd: '/nonexistent' })).code, 'cwd_not_found');
  assert.equal((await host.req('exec', {})).code, 'invalid_argument');
  assert.equal((await host.req('exec', { argv: 'ls' })).code, 'invalid_argument');
});

test('stdout/stderr exact bytes, env, cwd', async () => {
  const e = host.exec({ cmd: 'printf "a\\0b\\377\\n"; printf err >&2; printf "%s|%s|%s" "$FOO" "$HOME" "$(pwd)"', env: { FOO: 'bär' }, cwd: '/tmp' });
  const x = await e.exit;
  assert.deepEqual(x.stdout, Buffer.concat([Buffer.from([0x61, 0, 0x62, 0xff, 0x0a]), Buffer.from('bär|/root|/tmp')]));
  assert.equal(x.stderr.toString(), 'err');
  assert.equal(x.event.exit_code, 0);
});

test('5 MB output with small credit window', async () => {
  const f = path.join(dir, 'r5');
  const data = crypto.randomBytes(5e6);
  fs.writeFileSync(f, data);
  const e = host.exec({ argv: ['sh', '-c', `cat ${f}; cat ${f} >&2`], window: 65536 }, { grantDelay: 1 });
  const x = await e.exit;
  assert.ok(x.stdout.equals(data), 'stdout differs ' + x.stdout.length);
  assert.ok(x.stderr.equals(data), 'stderr differs');
});

test('backpressure blocks the child', async () => {
  // Grant nothing: the child must block after the pipe fills, then finish once granted.
  let got = 0;
  const e = host.exec({ argv: ['head', '-c', '3000000', '/dev/zero'], window: 10000 }, { grant: () => 0, onData: (ch, b) => (got += b.length) });
  const res = await e.res;
  await sleep(500);
  assert.equal(got, 10000);
  const l = await host.req('proc.list');
  assert.equal(l.procs.find((p) => p.proc === res.proc).running, true);
  e.grant(1, 3000000);
  const x = await e.exit;
  assert.equal(x.stdout.length, 3000000);
});

test('stdin streaming', async () => {
  const data = crypto.randomBytes(1 << 20);
  const e = host.exec({ argv: ['sha256sum'], stdin: true });
  assert.equal((await e.res).window > 0, true);
  await e.write(data);
  await e.end();
  const x = await e.exit;
  assert.equal(x.stdout.toString().split(' ')[0], crypto.createHash('sha256').update(data).digest('hex'));
});

test('stdin_data', async () => {
  const x = await host.exec({ argv: ['cat'], stdin_data: b64('hello\n') }).exit;
  assert.equal(x.stdout.toString(), 'hello\n');
});

test('timeout kills setsid grandchild', async () => {
  const t0 = Date.now();
  const e = host.exec({ cmd: 'setsid sleep 1000 & echo $!; sleep 1000', timeout_ms: 800 });
  const x = await e.exit;
  assert.ok(Date.now() - t0 < 5000);
  assert.equal(x.event.timed_out, true);
  assert.equal(x.event.signal, 9);
  assert.equal(x.event.exit_code, null);
  const gc = Number(x.stdout.toString().trim());
  await sleep(200);
  assert.equal(alive(gc), false, 'grandchild survived');
});

test('nohup background survives exec end; late writes discarded', async () => {
  const e = host.exec({ cmd: 'nohup sleep 100 >/dev/null 2>&1 & echo $!; (sleep 0.5; echo late; sleep 100) & echo $!; echo $$' });
  const x = await e.exit;
  const [a, b, g] = x.stdout.toString().trim().split('\n').map(Number);
  await sleep(1500);
  assert.ok(alive(a), 'nohup sleep died');
  assert.ok(alive(b), 'background writer died (SIGPIPE?)');
  process.kill(a, 'SIGKILL');
  execSync(`pkill -KILL -g ${g} || true`);
});

test('pty: size, resize, ^C', async () => {
  let out = '';
  const e = host.exec({ cmd: 'stty size; read x; stty size', pty: { rows: 24, cols: 80 } }, { onData: (ch, b) => (out += b) });
  const res = await e.res;
  assert.ok(res.window > 0);
  while (!out.includes('24 80')) await sleep(20);
  assert.deepEqual(await host.req('pty.resize', { proc: res.proc, rows: 40, cols: 120 }), { ok: true });
  await e.write(Buffer.from('\n'));
  const x = await e.exit;
  assert.match(x.stdout.toString(), /40 120/);
  assert.equal(x.event.exit_code, 0);

  const e2 = host.exec({ argv: ['sleep', '100'], pty: {} });
  await e2.res;
  await sleep(300);
  await e2.write(Buffer.from('\x03'));
  const x2 = await e2.exit;
  assert.equal(x2.event.signal, 2);
});

test('background proc: read/wait/stdin/kill/release', async () => {
  const r = await host.req('exec', { argv: ['cat'], mode: 'buffer', stdin: true, buffer_bytes: 4096 });
  assert.equal(r.ok, true);
  assert.deepEqual(await host.req('proc.stdin', { proc: r.proc, data: b64('x'.repeat(10000)) }), { ok: true });
  assert.deepEqual(await host.req('proc.wait', { proc: r.proc, timeout_ms: 200 }), { ok: true, running: true });
  let rd;
  for (let i = 0; i < 50; i++) {
    rd = await host.req('proc.read', { proc: r.proc, channel: 1, offset: 0 });
    if (rd.next_offset === 10000) break;
    await sleep(20);
  }
  assert.equal(rd.next_offset, 10000);
  assert.equal(rd.offset, 10000 - 4096);
  assert.equal(rd.dropped, true);
  assert.equal(Buffer.from(rd.data, 'base64').toString(), 'x'.repeat(4096));
  assert.equal(rd.eof, false);
  await host.req('proc.stdin', { proc: r.proc, data: b64('yz'), eof: true });
  const w = await host.req('proc.wait', { proc: r.proc, timeout_ms: 5000 });
  assert.deepEqual(w, { ok: true, running: false, exit_code: 0, signal: null, timed_out: false });
  rd = await host.req('proc.read', { proc: r.proc, channel: 1, offset: 10000 });
  assert.equal(Buffer.from(rd.data, 'base64').toString(), 'yz');
  assert.equal(rd.eof, true);
  assert.deepEqual(await host.req('proc.release', { proc: r.proc }), { ok: true });
  assert.equal((await host.req('proc.read', { proc: r.proc })).code, 'proc_not_found');

  const k = await host.req('exec', { argv: ['sleep', '100'], mode: 'buffer' });
  const wp = host.req('proc.wait', { proc: k.proc });
  const l = await host.req('proc.list');
  const ent = l.procs.find((p) => p.proc === k.proc);
  assert.deepEqual([ent.mode, ent.running, ent.argv], ['buffer', true, ['sleep', '100']]);
  assert.deepEqual(await host.req('proc.kill', { proc: k.proc }), { ok: true });
  assert.equal((await wp).signal, 9);
  const s = await host.req('exec', { cmd: 'trap "exit 7" TERM; sleep 100 & wait', mode: 'buffer' });
  await sleep(300);
  await host.req('proc.signal', { proc: s.proc, signal: 15 });
  assert.equal((await host.req('proc.wait', { proc: s.proc, timeout_ms: 5000 })).exit_code, 7);
  assert.equal((await host.req('proc.kill', { proc: 999999 })).code, 'proc_not_found');
});

test('file write+read 100 MB, bounded RSS', async () => {
  const size = 100 * 1024 * 1024;
  const f = path.join(dir, 'big');
  const hash = crypto.createHash('sha256');
  let credit = 0, waiters = [];
  const wid = host.req('file.write', { path: f, mode: 0o600 }, {
    credit: (ch, n) => { credit += n; waiters.splice(0).forEach((x) => x()); },
    event: (e) => done(e), data() {}, eof() {},
  });
  let done;
  const doneP = new Promise((r) => (done = r));
  const wr = await wid;
  assert.equal(wr.ok, true);
  credit = wr.window;
  const chunk = crypto.randomBytes(65536);
  for (let off = 0; off < size; off += 65536) {
    while (credit < 65536) await new Promise((r) => waiters.push(r));
    const c = Buffer.from(chunk);
    c.writeUInt32BE(off, 0);
    hash.update(c);
    host.data(wid.id, 3, c);
    credit -= 65536;
  }
  host.eof(wid.id, 3);
  assert.deepEqual(await doneP, { event: 'done', bytes: size });
  assert.equal(fs.statSync(f).mode & 0o777, 0o600);
  assert.equal(crypto.createHash('sha256').update(fs.readFileSync(f)).digest('hex'), hash.digest('hex'));
  assert.deepEqual(fs.readdirSync(dir).filter((n) => n.includes('den-tmp')), []);

  const h2 = crypto.createHash('sha256');
  let got = 0;
  let rdone;
  const rP = new Promise((r) => (rdone = r));
  const rid = host.req('file.read', { path: f, window: 262144 }, {
    data: (ch, b) => { h2.update(b); got += b.length; host.credit(rid.id, 3, b.length); },
    eof: () => rdone('eof'), event: (e) => rdone(e),
  });
  const rr = await rid;
  assert.equal(rr.size, size);
  assert.equal(rr.mode, 0o600);
  assert.equal(await rP, 'eof');
  assert.equal(got, size);
  assert.equal(h2.digest('hex'), crypto.createHash('sha256').update(fs.readFileSync(f)).digest('hex'));
  if (!process.env.VALGRIND) {
    const hwm = rssKb(realAgentPid(), 'VmHWM');
    console.log(`    agent VmHWM ${hwm} kB`);
    assert.ok(hwm < 20000, 'agent RSS too high: ' + hwm);
  }
  fs.unlinkSync(f);
});

test('file read range + errors', async () => {
  const f = path.join(dir, 'small');
  fs.writeFileSync(f, '0123456789');
  const chunks = [];
  let fin;
  const p = new Promise((r) => (fin = r));
  const r = await host.req('file.read', { path: f, offset: 2, length: 5 }, { data: (c, b) => chunks.push(b), eof: () => fin(), event: (e) => fin(e) });
  assert.equal(r.size, 10);
  await p;
  assert.equal(Buffer.concat(chunks).toString(), '23456');
  assert.equal((await host.req('file.read', { path: dir })).code, 'is_a_directory');
  assert.equal((await host.req('file.read', { path: dir + '/nope' })).code, 'file_not_found');
  assert.equal((await host.req('file.read', { path: 'relative' })).code, 'invalid_argument');
});

test('file errors that are the caller\'s, and rename across filesystems', async () => {
  const readErr = async (p) => {
    let fin;
    const done = new Promise((r) => (fin = r));
    const r = await host.req('file.read', { path: p }, { data() {}, eof: () => fin('eof'), event: (e) => fin(e) });
    return r.ok === false ? r : done;
  };
  // It opens, but reading its first bytes fails (EIO): a mid-stream `unreadable`.
  assert.equal((await readErr('/proc/self/mem')).code, 'unreadable');
  fs.symlinkSync('loop-b', path.join(dir, 'loop-a'));
  fs.symlinkSync('loop-a', path.join(dir, 'loop-b'));
  assert.equal((await readErr(path.join(dir, 'loop-a'))).code, 'invalid_argument');
  assert.equal((await host.req('file.list', { path: path.join(dir, 'loop-b') })).code, 'invalid_argument');
  // EXDEV: the test dir is on the disk, /dev/shm is a tmpfs; rename falls back to copy + delete.
  const shm = fs.mkdtempSync('/dev/shm/den-test-');
  try {
    if (fs.statSync(shm).dev === fs.statSync(dir).dev) return console.log('    (skipped the EXDEV part: /dev/shm is on the same filesystem)');
    const t = path.join(dir, 'xdev');
    fs.mkdirSync(t + '/sub/empty', { recursive: true });
    fs.writeFileSync(t + '/sub/f', 'deep');
    fs.chmodSync(t + '/sub/f', 0o640);
    fs.symlinkSync('sub/f', t + '/link');
    execSync(`mkfifo ${t}/fifo`);
    fs.utimesSync(t + '/sub/f', 1e9, 1e9);
    assert.deepEqual(await host.req('file.rename', { from: t, to: shm + '/moved' }), { ok: true });
    assert.equal(fs.existsSync(t), false);
    assert.equal(fs.readFileSync(shm + '/moved/sub/f', 'utf8'), 'deep');
    const st = fs.statSync(shm + '/moved/sub/f');
    assert.deepEqual([st.mode & 0o777, st.mtimeMs], [0o640, 1e12]);
    assert.equal(fs.readlinkSync(shm + '/moved/link'), 'sub/f');
    assert.ok(fs.lstatSync(shm + '/moved/fifo').isFIFO());
    assert.ok(fs.statSync(shm + '/moved/sub/empty').isDirectory());
    // A single file back, over an existing one; a directory never replaces a non-empty one.
    fs.writeFileSync(path.join(dir, 'old'), 'old');
    assert.deepEqual(await host.req('file.rename', { from: shm + '/moved/sub/f', to: path.join(dir, 'old') }), { ok: true });
    assert.equal(fs.readFileSync(path.join(dir, 'old'), 'utf8'), 'deep');
    fs.mkdirSync(path.join(dir, 'full/x'), { recursive: true });
    assert.equal((await host.req('file.rename', { from: shm + '/moved', to: path.join(dir, 'full') })).code, 'not_empty');
    assert.ok(fs.lstatSync(shm + '/moved/link').isSymbolicLink()); // untouched
    assert.deepEqual(fs.readdirSync(dir).filter((n) => n.includes('den-tmp')), []);
  } finally {
    fs.rmSync(shm, { recursive: true, force: true });
  }
});

test('file ops', async () => {
  const d = path.join(dir, 'ops');
  assert.deepEqual(await host.req('file.mkdir', { path: d + '/a/b', parents: true }), { ok: true });
  assert.equal((await host.req('file.mkdir', { path: d + '/a' })).code, 'already_exists');
  assert.equal((await host.req('file.mkdir', { path: d + '/x/y' })).code, 'file_not_found');
  fs.writeFileSync(d + '/a/f', 'hi');
  fs.symlinkSync('/etc', d + '/a/link');
  const st = await host.req('file.stat', { path: d + '/a/f' });
  assert.deepEqual([st.type, st.size], ['file', 2]);
  const sl = await host.req('file.stat', { path: d + '/a/link' });
  assert.deepEqual([sl.type, sl.target], ['symlink', '/etc']);
  assert.equal((await host.req('file.stat', { path: d + '/zz' })).code, 'file_not_found');
  assert.equal((await host.req('file.stat', { path: d + '/a/f/x' })).code, 'not_a_directory');
  const l = await host.req('file.list', { path: d + '/a' });
  assert.deepEqual(l.entries.map((e) => `${e.name}:${e.type}`).sort(), ['b:dir', 'f:file', 'link:symlink']);
  assert.equal(l.truncated, false);
  assert.equal((await host.req('file.list', { path: d + '/a/f' })).code, 'not_a_directory');
  assert.equal((await host.req('file.remove', { path: d + '/a' })).code, 'not_empty');
  assert.deepEqual(await host.req('file.rename', { from: d + '/a/f', to: d + '/g' }), { ok: true });
  assert.equal(fs.readFileSync(d + '/g', 'utf8'), 'hi');
  assert.equal((await host.req('file.rename', { from: d + '/nope', to: d + '/g2' })).code, 'file_not_found');
  assert.deepEqual(await host.req('file.remove', { path: d + '/a', recursive: true }), { ok: true });
  assert.ok(fs.existsSync('/etc/passwd'));
  assert.equal(fs.existsSync(d + '/a'), false);
  assert.deepEqual(await host.req('file.remove', { path: d + '/g' }), { ok: true });
  // file.write with parents and error
  let ev;
  const evP = new Promise((r) => (ev = r));
  const w = await host.req('file.write', { path: d + '/n/e/w.txt', parents: true }, { event: (e) => ev(e), credit() {}, data() {}, eof() {} });
  assert.equal(w.ok, true);
  host.data(host.nextId - 1, 3, Buffer.from('content'));
  host.eof(host.nextId - 1, 3);
  assert.deepEqual(await evP, { event: 'done', bytes: 7 });
  assert.equal(fs.readFileSync(d + '/n/e/w.txt', 'utf8'), 'content');
  assert.equal((await host.req('file.write', { path: d + '/q/r' })).code, 'file_not_found');
  assert.equal((await host.req('file.write', { path: d })).code, 'is_a_directory');
  // many entries
  fs.mkdirSync(d + '/many');
  for (let i = 0; i < 10050; i++) fs.writeFileSync(`${d}/many/${i}`, '');
  const m = await host.req('file.list', { path: d + '/many' });
  assert.equal(m.entries.length, 10000);
  assert.equal(m.truncated, true);
});

// A user of the host to run as: the agent reads the host's /etc/passwd here, as it reads the guest's.
const passwd = (name) => {
  const l = fs.readFileSync('/etc/passwd', 'utf8').split('\n').find((x) => x.startsWith(name + ':'));
  const f = l.split(':');
  return { uid: Number(f[2]), gid: Number(f[3]), home: f[5] };
};
// `id -G` as initgroups would make it: the primary group, then every group listing the user.
const groupsOf = (name) => {
  const { gid } = passwd(name);
  const extra = fs.readFileSync('/etc/group', 'utf8').split('\n').map((l) => l.split(':'))
    .filter((f) => f.length >= 4 && (f[3] || '').split(',').includes(name) && Number(f[2]) !== gid).map((f) => Number(f[2]));
  return [gid, ...extra].sort((a, b) => a - b);
};
// A directory anyone may write to (the test dir itself is root's, 0700).
const openDir = () => { const d = fs.mkdtempSync(path.join(os.tmpdir(), 'den-user-')); fs.chmodSync(d, 0o777); return d; };

test('exec as another user: ids, groups, env, home as cwd, umask, every mode', async () => {
  const nb = passwd('nobody');
  const home = fs.existsSync(nb.home) ? nb.home : '/';
  const x = await host.exec({ cmd: 'id -u; id -g; id -G | tr " " "\\n" | sort -n | tr "\\n" " "; echo; echo "$HOME|$USER|$LOGNAME|$(pwd)"; umask', user: 'nobody' }).exit;
  assert.equal(x.event.exit_code, 0, x.stderr.toString());
  assert.deepEqual(x.stdout.toString().split('\n'), [String(nb.uid), String(nb.gid), groupsOf('nobody').join(' ') + ' ', `${nb.home}|nobody|nobody|${home}`, '0022', '']);
  // The request's env and cwd win; files it makes are its own, 0644 and 0755.
  const d = openDir();
  try {
    const y = await host.exec({ cmd: 'echo "$HOME|$USER"; touch f; mkdir sub; stat -c "%u:%g %a" f sub', user: 'nobody', cwd: d, env: { HOME: '/tmp', USER: 'who' } }).exit;
    assert.equal(y.stdout.toString(), `/tmp|who\n${nb.uid}:${nb.gid} 644\n${nb.uid}:${nb.gid} 755\n`);
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
  // It really is unprivileged: root's files are out of reach.
  const z = await host.exec({ argv: ['cat', '/etc/shadow'], user: 'nobody' }).exit;
  assert.notEqual(z.event.exit_code, 0);
  assert.match(z.stderr.toString(), /Permission denied/);
  // "root" by name is root, with root's home; no user at all is root as before (no LOGNAME).
  const r = await host.exec({ cmd: 'id -u; echo "$HOME|$USER|${LOGNAME-unset}|$(pwd)"', user: 'root' }).exit;
  assert.equal(r.stdout.toString(), `0\n${passwd('root').home}|root|root|${passwd('root').home}\n`);
  const dflt = await host.exec({ cmd: 'id -u; echo "$HOME|$USER|${LOGNAME-unset}|$(pwd)"' }).exit;
  assert.equal(dflt.stdout.toString(), '0\n/root|root|unset|/\n');
  // A background process and a pty run as the user too (the terminal is its own).
  const b = await host.req('exec', { argv: ['id', '-u'], mode: 'buffer', user: 'nobody' });
  assert.equal((await host.req('proc.wait', { proc: b.proc, timeout_ms: 5000 })).exit_code, 0);
  assert.equal(Buffer.from((await host.req('proc.read', { proc: b.proc, channel: 1 })).data, 'base64').toString(), `${nb.uid}\n`);
  await host.req('proc.release', { proc: b.proc });
  const t = await host.exec({ cmd: 'id -u; stat -c %u "$(tty)"', pty: {}, user: 'nobody' }).exit;
  assert.equal(t.stdout.toString().replace(/\r/g, ''), `${nb.uid}\n${nb.uid}\n`);
});

test('exec as a user that does not exist, or with a bad name, is invalid_argument', async () => {
  const r = await host.req('exec', { argv: ['true'], user: 'no-such-user-here' });
  assert.equal(r.code, 'invalid_argument');
  assert.match(r.message, /no user "no-such-user-here"/);
  for (const user of ['', '../etc', 'a:b', 'x'.repeat(33), 'a b', '-rf', 7, true, ['root']]) {
    assert.equal((await host.req('exec', { argv: ['true'], user })).code, 'invalid_argument', JSON.stringify(user));
  }
  assert.equal((await host.req('exec', { argv: ['true'], mode: 'buffer', user: 'nobody2' })).code, 'invalid_argument');
  assert.equal((await host.req('proc.list')).procs.some((p) => p.argv?.[0] === 'true' && p.running), false);
});

test('file.write and file.mkdir with a user: what they make is its own', async () => {
  const nb = passwd('nobody');
  const d = path.join(dir, 'owned');
  fs.mkdirSync(d);
  const owner = (p) => { const st = fs.statSync(p); return `${st.uid}:${st.gid} ${(st.mode & 0o7777).toString(8)}`; };
  const me = `${nb.uid}:${nb.gid}`;
  const write = async (args, content) => {
    let ev;
    const evP = new Promise((r) => (ev = r));
    const w = await host.req('file.write', args, { event: (e) => ev(e), credit() {}, data() {}, eof() {} });
    if (!w.ok) return w;
    host.data(host.nextId - 1, 3, Buffer.from(content));
    host.eof(host.nextId - 1, 3);
    return evP;
  };
  assert.deepEqual(await write({ path: d + '/n/e/w.txt', parents: true, user: 'nobody' }, 'x'), { event: 'done', bytes: 1 });
  assert.deepEqual([owner(d + '/n'), owner(d + '/n/e'), owner(d + '/n/e/w.txt')], [`${me} 755`, `${me} 755`, `${me} 644`]);
  assert.equal(fs.statSync(d).uid, 0, 'a parent that was there keeps its owner');
  // The requested mode, set-id bits included, survives the chown.
  assert.deepEqual(await write({ path: d + '/s', mode: 0o2750, user: 'nobody' }, 'y'), { event: 'done', bytes: 1 });
  assert.equal(owner(d + '/s'), `${me} 2750`);
  // Overwriting a root file as the user: the new file is the user's.
  fs.writeFileSync(d + '/r', 'old');
  await write({ path: d + '/r', user: 'nobody' }, 'new');
  assert.equal(owner(d + '/r'), `${me} 644`);
  assert.deepEqual(await host.req('file.mkdir', { path: d + '/m1/m2', parents: true, user: 'nobody' }), { ok: true });
  assert.deepEqual([owner(d + '/m1'), owner(d + '/m1/m2')], [`${me} 755`, `${me} 755`]);
  assert.deepEqual(await host.req('file.mkdir', { path: d + '/m3', mode: 0o700, user: 'nobody' }), { ok: true });
  assert.equal(owner(d + '/m3'), `${me} 700`);
  // No user: root's, as before.
  await write({ path: d + '/plain' }, 'z');
  assert.equal(owner(d + '/plain'), '0:0 644');
  // An unknown user makes nothing.
  assert.equal((await host.req('file.mkdir', { path: d + '/u1/u2', parents: true, user: 'no-such-user-here' })).code, 'invalid_argument');
  assert.equal((await host.req('file.write', { path: d + '/u3/f', parents: true, user: 'no-such-user-here' })).code, 'invalid_argument');
  assert.deepEqual(['u1', 'u3'].filter((n) => fs.existsSync(path.join(d, n))), []);
  assert.deepEqual(fs.readdirSync(d).filter((n) => n.includes('den-tmp')), []);
});

// The host's own view of a file's attributes (Node has no xattr API).
const py = (code) => execFileSync('python3', ['-c', code], { encoding: 'utf8' });

test('file.setxattr / file.getxattrs: user.* only, bounded, checked before anything is set', async () => {
  const f = path.join(dir, 'xa');
  fs.writeFileSync(f, '');
  const attrs = { 'user.e2b.a': '1', 'user.e2b.ü': 'värde ✓', 'user.empty': '' };
  assert.deepEqual(await host.req('file.setxattr', { path: f, attrs }), { ok: true });
  assert.deepEqual(await host.req('file.getxattrs', { path: f }), { ok: true, attrs, truncated: false });
  assert.equal(py(`import os; print(os.getxattr(${JSON.stringify(f)}, 'user.e2b.ü').decode())`), 'värde ✓\n');
  // Other namespaces are neither listed nor settable; a value that is not UTF-8 comes back valid JSON.
  py(`import os; os.setxattr(${JSON.stringify(f)}, 'trusted.den', b'x'); os.setxattr(${JSON.stringify(f)}, 'user.bin', b'a\\x00\\xff')`);
  assert.deepEqual((await host.req('file.getxattrs', { path: f })).attrs, { ...attrs, 'user.bin': 'a\u0000\ufffd' });
  const before = (await host.req('file.getxattrs', { path: f })).attrs;
  const bad = [
    { 'trusted.x': 'v' }, { 'security.x': 'v' }, { 'user.': 'v' }, { user: 'v' }, { ['user.' + 'n'.repeat(251)]: 'v' },
    { 'user.n': 5 }, { 'user.big': 'v'.repeat(65537) },
    Object.fromEntries(Array.from({ length: 129 }, (_, i) => [`user.k${i}`, ''])),
    Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`user.t${i}`, 'v'.repeat(60000)])),
    { 'user.ok': 'v', 'system.posix_acl_access': 'v' },
  ];
  for (const a of bad) assert.equal((await host.req('file.setxattr', { path: f, attrs: a })).code, 'invalid_argument', Object.keys(a)[0].slice(0, 40));
  assert.equal((await host.req('file.setxattr', { path: f, attrs: ['user.x'] })).code, 'invalid_argument');
  assert.equal((await host.req('file.setxattr', { path: f })).code, 'invalid_argument');
  assert.deepEqual((await host.req('file.getxattrs', { path: f })).attrs, before, 'a refused set changed nothing');
  assert.equal((await host.req('file.setxattr', { path: f + '.nope', attrs: { 'user.a': 'b' } })).code, 'file_not_found');
  assert.equal((await host.req('file.getxattrs', { path: f + '.nope' })).code, 'file_not_found');
  assert.equal((await host.req('file.getxattrs', { path: 'relative' })).code, 'invalid_argument');
  // A directory has attributes too; a file with none lists none.
  assert.deepEqual(await host.req('file.setxattr', { path: dir, attrs: { 'user.d': 'dir' } }), { ok: true });
  assert.deepEqual((await host.req('file.getxattrs', { path: dir })).attrs, { 'user.d': 'dir' });
  fs.writeFileSync(f + '2', '');
  assert.deepEqual(await host.req('file.getxattrs', { path: f + '2' }), { ok: true, attrs: {}, truncated: false });
  // More than the agent lists at once (set here behind its back): truncated, never an oversized frame.
  py(`import os\nfor i in range(140): os.setxattr(${JSON.stringify(f + '2')}, 'user.%d' % i, b'')`);
  const many = await host.req('file.getxattrs', { path: f + '2' });
  assert.equal(Object.keys(many.attrs).length, 128);
  assert.equal(many.truncated, true);
});

test('sys.metrics: the counters of this machine, and CPU busy ticks that grow under load', async () => {
  const m1 = await host.req('sys.metrics');
  assert.equal(m1.ok, true);
  for (const k of ['timestamp_ms', 'cpu_count', 'cpu_total_ticks', 'cpu_busy_ticks', 'mem_total_kb', 'mem_available_kb', 'mem_cache_kb', 'disk_total_bytes', 'disk_used_bytes']) {
    assert.ok(Number.isSafeInteger(m1[k]) && m1[k] >= 0, `${k}: ${m1[k]}`);
  }
  assert.ok(Math.abs(m1.timestamp_ms - Date.now()) < 5000);
  assert.equal(m1.cpu_count, os.availableParallelism());
  const memTotal = Number(/^MemTotal:\s+(\d+)/m.exec(fs.readFileSync('/proc/meminfo', 'utf8'))[1]);
  assert.equal(m1.mem_total_kb, memTotal);
  assert.ok(m1.mem_available_kb <= m1.mem_total_kb && m1.mem_cache_kb > 0 && m1.mem_cache_kb < m1.mem_total_kb);
  const st = fs.statfsSync('/');
  assert.equal(m1.disk_total_bytes, st.blocks * st.bsize);
  assert.ok(Math.abs(m1.disk_used_bytes - (st.blocks - st.bfree) * st.bsize) < 1 << 30);
  assert.ok(m1.cpu_busy_ticks <= m1.cpu_total_ticks);
  await host.exec({ argv: ['timeout', '1', 'sh', '-c', 'while :; do :; done'] }).exit;
  const m2 = await host.req('sys.metrics');
  // A second of one busy core is ~100 ticks of busy time (USER_HZ), among all the CPUs' ticks.
  assert.ok(m2.cpu_busy_ticks - m1.cpu_busy_ticks >= 30, `busy grew by ${m2.cpu_busy_ticks - m1.cpu_busy_ticks}`);
  assert.ok(m2.cpu_total_ticks - m1.cpu_total_ticks >= m2.cpu_busy_ticks - m1.cpu_busy_ticks);
});

test('new session detaches a streaming exec into buffer mode', async () => {
  const e = host.exec({ cmd: 'for i in 1 2 3 4 5 6; do echo $i; sleep 0.2; done' });
  const res = await e.res;
  await sleep(300);
  const h = await host.hello();
  assert.equal(h.ok, true);
  const l = await host.req('proc.list');
  assert.equal(l.procs.find((p) => p.proc === res.proc).mode, 'buffer');
  const w = await host.req('proc.wait', { proc: res.proc, timeout_ms: 5000 });
  assert.equal(w.exit_code, 0);
  const rd = await host.req('proc.read', { proc: res.proc, channel: 1, offset: 0 });
  // What was streamed before the detach counts as dropped; the rest is in the ring.
  const txt = Buffer.from(rd.data, 'base64').toString();
  assert.equal(rd.next_offset, 12);
  assert.equal(rd.dropped, true);
  assert.equal(txt, '1\n2\n3\n4\n5\n6\n'.slice(rd.offset), JSON.stringify(rd));
  await host.req('proc.release', { proc: res.proc });
});

test('disconnect, reconnect, same session keeps streams', async () => {
  const e = host.exec({ cmd: 'sleep 0.5; echo done' });
  const res = await e.res;
  const session = host.session;
  host.disconnect();
  await sleep(100);
  await host.waitConn();
  const h = await host.hello(session);
  assert.equal(h.ok, true);
  const x = await e.exit;
  assert.equal(x.stdout.toString(), 'done\n');
  assert.equal(x.event.proc, res.proc);
});

test('a file write aborted by disconnect leaves no temp file', async () => {
  const f = path.join(dir, 'aborted');
  const w = await host.req('file.write', { path: f }, { credit() {}, event() {}, data() {}, eof() {} });
  assert.equal(w.ok, true);
  host.data(host.nextId - 1, 3, Buffer.from('partial'));
  await sleep(100);
  assert.equal(fs.readdirSync(dir).filter((n) => n.includes('den-tmp')).length, 1);
  host.disconnect();
  await sleep(100);
  assert.equal(fs.readdirSync(dir).filter((n) => n.includes('den-tmp')).length, 0);
  await host.waitConn();
  await host.hello();
});

// A TCP server on the host's loopback for tunnel tests (the agent runs as a host process).
async function tcpServer(onConn, { host: h = '127.0.0.1' } = {}) {
  const srv = net.createServer({ allowHalfOpen: true }, (s) => { s.on('error', () => {}); onConn(s); });
  await new Promise((resolve, reject) => { srv.once('error', reject); srv.listen(0, h, resolve); });
  srv.port = srv.address().port;
  return srv;
}
const fdCount = (pid) => fs.readdirSync(`/proc/${pid}/fd`).length;

test('tunnel: 5 MB echoed both ways, byte-identical, within credit', async () => {
  const fds = fdCount(agentPid());
  const srv = await tcpServer((s) => s.pipe(s));
  const data = crypto.randomBytes(5e6);
  const t0 = Date.now();
  const t = host.tunnel({ port: srv.port, window: 65536 }, { grantDelay: 1 });
  const res = await t.res;
  assert.equal(res.ok, true);
  assert.equal(res.window, 262144);
  await t.write(data);
  await t.end();
  assert.deepEqual(await t.closed, { event: 'closed' });
  console.log(`    5 MB echo in ${Date.now() - t0} ms`);
  assert.equal(t.eof, true);
  assert.ok(t.received().equals(data), 'echo differs, got ' + t.receivedBytes());
  assert.deepEqual(t.frames.slice(-2), ['eof', 'event']);
  srv.close();
  await sleep(50);
  assert.equal(fdCount(agentPid()), fds, 'agent leaked fds');
});

test('tunnel: without credit the server blocks; no spinning', async () => {
  const total = 32 << 20;
  let sent = 0;
  const chunk = Buffer.alloc(65536, 7);
  const srv = await tcpServer((s) => {
    const pump = () => {
      while (sent < total) {
        sent += chunk.length;
        if (!s.write(chunk)) return void s.once('drain', pump);
      }
      s.end();
    };
    pump();
  });
  const t = host.tunnel({ port: srv.port, window: 10000 }, { grant: () => 0 });
  assert.equal((await t.res).ok, true);
  await sleep(300);
  const c0 = cpuTicks(agentPid());
  await sleep(700);
  assert.ok(cpuTicks(agentPid()) - c0 <= 2, 'agent busy while out of credit');
  assert.equal(t.receivedBytes(), 10000);
  assert.ok(sent < total, 'the server was never blocked');
  t.grant(total);
  await t.waitEof();
  assert.equal(t.receivedBytes(), total);
  assert.equal(t.closedEvent, undefined, 'closed before the host finished');
  await t.end();
  assert.deepEqual(await t.closed, { event: 'closed' });
  srv.close();
});

test('tunnel: half-close both ways', async () => {
  // The host finishes first: the server still answers after its EOF.
  const srv = await tcpServer((s) => {
    const parts = [];
    s.on('data', (d) => parts.push(d));
    s.on('end', () => s.end('got ' + Buffer.concat(parts).length));
  });
  const t = host.tunnel({ port: srv.port });
  assert.equal((await t.res).ok, true);
  await t.write(Buffer.from('hello'));
  await t.end();
  assert.deepEqual(await t.closed, { event: 'closed' });
  assert.equal(t.received().toString(), 'got 5');

  // The server finishes first: the host can still send, and the tunnel idles quietly.
  let gotResolve;
  const got = new Promise((r) => (gotResolve = r));
  const srv2 = await tcpServer((s) => {
    s.end('bye');
    const parts = [];
    s.on('data', (d) => parts.push(d));
    s.on('end', () => gotResolve(Buffer.concat(parts).toString()));
  });
  const t2 = host.tunnel({ port: srv2.port });
  assert.equal((await t2.res).ok, true);
  await t2.waitEof();
  assert.equal(t2.received().toString(), 'bye');
  const c0 = cpuTicks(agentPid());
  await sleep(500);
  assert.ok(cpuTicks(agentPid()) - c0 <= 2, 'agent busy on a half-closed tunnel');
  assert.equal(t2.closedEvent, undefined);
  await t2.write(Buffer.from('after'));
  await t2.end();
  assert.equal(await got, 'after');
  assert.deepEqual(await t2.closed, { event: 'closed' });
  srv.close();
  srv2.close();
});

test('tunnel: a reset by the server ends it with an error', async () => {
  const srv = await tcpServer((s) => setTimeout(() => s.resetAndDestroy(), 50));
  const t = host.tunnel({ port: srv.port });
  assert.equal((await t.res).ok, true);
  const e = await t.closed;
  assert.match(e.error, /reset/i);
  // A reset while the host holds no credit is noticed too (POLLERR without reading).
  const t2 = host.tunnel({ port: srv.port, window: 0 });
  assert.equal((await t2.res).ok, true);
  assert.match((await t2.closed).error, /reset/i);
  srv.close();
});

test('tunnel: refused port, bad arguments, ::1 fallback', async () => {
  const srv = await tcpServer(() => {});
  const port = srv.port;
  await new Promise((r) => srv.close(r));
  const r1 = await host.req('tcp.connect', { port });
  assert.equal(r1.code, 'connection_refused', JSON.stringify(r1));
  assert.equal((await host.req('tcp.connect', { port, host: '127.0.0.1' })).code, 'connection_refused');
  for (const a of [{ port: 0 }, { port: 65536 }, {}, { port: '80' }, { port, host: '10.0.0.1' }, { port, host: 'example.com' }, { port, host: '::' }, { port, window: -1 }]) {
    assert.equal((await host.req('tcp.connect', a)).code, 'invalid_argument', JSON.stringify(a));
  }
  const v6 = await tcpServer((s) => s.end('six'), { host: '::1' }).catch(() => null);
  if (!v6) return console.log('    (no IPv6 loopback here: fallback not tested)');
  const t = host.tunnel({ port: v6.port });
  assert.equal((await t.res).ok, true);
  await t.waitEof();
  assert.equal(t.received().toString(), 'six');
  await t.end();
  assert.deepEqual(await t.closed, { event: 'closed' });
  assert.equal((await host.req('tcp.connect', { port: v6.port, host: '127.0.0.1' })).code, 'connection_refused');
  v6.close();
});

test('tunnel: stream.cancel resets it at once, nothing more is sent', async () => {
  let closedResolve;
  const serverClosed = new Promise((r) => (closedResolve = r));
  const srv = await tcpServer((s) => { s.on('close', closedResolve); setTimeout(() => s.write('late'), 300); });
  const t = host.tunnel({ port: srv.port });
  assert.equal((await t.res).ok, true);
  await t.write(Buffer.from('x'));
  assert.deepEqual(await host.req('stream.cancel', { stream: t.id }), { ok: true });
  await serverClosed;
  await sleep(400);
  assert.deepEqual(t.frames, []);
  // Late frames from the host for it are ignored.
  host.data(t.id, 0, Buffer.from('late'));
  host.eof(t.id, 0);
  host.credit(t.id, 1, 1000);
  assert.deepEqual(await host.req('sys.ping'), { ok: true });
  assert.deepEqual(await host.req('stream.cancel', { stream: t.id }), { ok: true });
  srv.close();
});

test('tunnel: a new session or a disconnect closes every tunnel', async () => {
  const closes = [];
  const srv = await tcpServer((s) => closes.push(new Promise((r) => s.on('close', r))));
  const open3 = async () => {
    closes.length = 0;
    const ts = [host.tunnel({ port: srv.port }), host.tunnel({ port: srv.port }), host.tunnel({ port: srv.port })];
    for (const t of ts) assert.equal((await t.res).ok, true);
    while (closes.length < 3) await sleep(10);
    return ts;
  };
  let ts = await open3();
  await host.hello();
  await Promise.all(closes);
  ts = await open3();
  const session = host.session;
  host.disconnect();
  await Promise.all(closes);
  await host.waitConn();
  await host.hello(session);
  await sleep(100);
  for (const t of ts) assert.equal(t.closedEvent, undefined);
  // And new ones work.
  const t = host.tunnel({ port: srv.port });
  assert.equal((await t.res).ok, true);
  await t.end();
  srv.close();
  await host.req('stream.cancel', { stream: t.id });
});

test('tunnel: at most 256 open, fds released', async () => {
  const fds = fdCount(agentPid());
  const srv = await tcpServer(() => {});
  const ts = [];
  for (let i = 0; i < 256; i++) ts.push(host.tunnel({ port: srv.port }));
  for (const t of ts) assert.equal((await t.res).ok, true);
  assert.equal((await host.req('tcp.connect', { port: srv.port })).code, 'limit_exceeded');
  for (const t of ts) await host.req('stream.cancel', { stream: t.id });
  const t = host.tunnel({ port: srv.port });
  assert.equal((await t.res).ok, true);
  await host.req('stream.cancel', { stream: t.id });
  await host.req('sys.ping');
  assert.equal(fdCount(agentPid()), fds, 'agent leaked fds');
  srv.close();
});

test('net.ports lists listening TCP sockets with their process', async () => {
  const srv = await tcpServer(() => {});
  const srv6 = await tcpServer(() => {}, { host: '::' }).catch(() => null);
  const r = await host.req('net.ports');
  assert.equal(r.ok, true);
  assert.equal(r.truncated, false);
  const comm = fs.readFileSync(`/proc/${process.pid}/comm`, 'utf8').trim();
  assert.deepEqual(r.ports.filter((p) => p.port === srv.port), [{ port: srv.port, address: '127.0.0.1', family: 4, pid: process.pid, process: comm }]);
  if (srv6) assert.deepEqual(r.ports.filter((p) => p.port === srv6.port), [{ port: srv6.port, address: '::', family: 6, pid: process.pid, process: comm }]);
  const sorted = r.ports.map((p) => p.port);
  assert.deepEqual(sorted, [...sorted].sort((a, b) => a - b));
  await new Promise((res) => srv.close(res));
  const r2 = await host.req('net.ports');
  assert.equal(r2.ports.some((p) => p.port === srv.port), false);
  srv6?.close();
});

test('garbage input resyncs', async () => {
  host.sock.write(Buffer.from([0xff, 0xff, 0xff, 0xff, 1, 2, 3]));
  await sleep(100);
  const r = await host.hello();
  assert.equal(r.ok, true);
});

test('idle CPU ~0', async () => {
  await sleep(300);
  const pid = realAgentPid();
  const t0 = cpuTicks(pid);
  await sleep(2000);
  const t1 = cpuTicks(pid);
  assert.ok(t1 - t0 <= 2, `agent used ${t1 - t0} ticks while idle`);
  // also while the host is disconnected
  host.disconnect();
  host.server.close();
  try { fs.unlinkSync(sock); } catch {}
  const t2 = cpuTicks(pid);
  await sleep(2000);
  const t3 = cpuTicks(pid);
  assert.ok(t3 - t2 <= 5, `agent used ${t3 - t2} ticks while disconnected`);
});

let failed = 0;
let passed = 0;
for (const t of tests) {
  if (filter && !t.name.includes(filter) && t.name !== 'hello') continue;
  const t0 = Date.now();
  try {
    await Promise.race([t.fn(), sleep(120000).then(() => { throw new Error('test timeout'); })]);
    if (host.violations.length) throw new Error('protocol violations: ' + host.violations.join('; '));
    passed++;
    console.log(`ok   ${t.name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    host.violations = [];
    console.log(`FAIL ${t.name}: ${e.stack}`);
  }
}
agent.kill('SIGTERM');
await sleep(process.env.VALGRIND ? 2000 : 100);
host.close();
if (process.env.VALGRIND) console.log(fs.readFileSync(dir + '/vg.log', 'utf8').split('\n').filter((l) => /ERROR SUMMARY|definitely|indirectly|possibly|Invalid|uninit/.test(l)).join('\n'));
if (!process.env.KEEP) fs.rmSync(dir, { recursive: true, force: true });
console.log(`agent: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
