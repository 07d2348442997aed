import { Readable } from "node:stream";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import { DenError, host, type GuestExecOptions, type HostAgent, type HostGuest, parseInput } from "@den/protocol";

const SandboxParams = z.object({ id: host.HostId });
const ProcParams = SandboxParams.extend({ proc: z.coerce.number().int().min(1) });
const PathQuery = z.object({ path: host.GuestPath });
const ReadQuery = PathQuery.extend({ offset: z.coerce.number().int().min(0).optional(), length: z.coerce.number().int().min(-1).optional() });
const WriteQuery = PathQuery.extend({ mode: z.coerce.number().int().min(0).max(0o7777).optional(), parents: z.enum(["true", "false"]).optional(), user: host.GuestUser.optional() });
const RemoveQuery = PathQuery.extend({ recursive: z.enum(["true", "false"]).optional() });
const LogsQuery = z.object({ channel: z.enum(["stdout", "stderr"]), offset: z.coerce.number().int().min(0), max: z.coerce.number().int().min(1).max(1024 * 1024) });
const WaitQuery = z.object({ timeout_ms: z.coerce.number().int().min(0).max(24 * 3600 * 1000) });

/** Wire exec options -> the guest's. */
export function execOptions(o: z.infer<typeof host.ExecOptionsWire>): GuestExecOptions & { bufferBytes?: number } {
  const { stdin_b64, ...rest } = o;
  const out: GuestExecOptions & { bufferBytes?: number } = {};
  for (const [k, v] of Object.entries(rest)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  if (stdin_b64 !== undefined) out.stdin = Buffer.from(stdin_b64, "base64");
  return out;
}

/**
 * A buffered exec, run as a streamed one here so that a caller who goes away takes its
 * command with it (as the API's own exec does), with the same per-stream bound.
 */
async function runBuffered(guest: HostGuest, req: FastifyRequest, body: host.ExecRequest): Promise<z.input<typeof host.ExecResultWire>> {
  const opts = execOptions(body.options);
  const max = opts.maxOutputBytes ?? 64 * 1024 * 1024;
  delete opts.maxOutputBytes;
  const p = await guest.execStream(body.command, opts);
  let done = false;
  req.raw.on("close", () => {
    if (!done) p.kill().catch(() => undefined);
  });
  try {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const len = { stdout: 0, stderr: 0 };
    for await (const c of p) {
      if (len[c.stream] + c.data.length > max) {
        await p.kill().catch(() => undefined);
        throw new DenError("payload_too_large", `${c.stream} exceeded ${max} bytes; use a streamed exec`);
      }
      len[c.stream] += c.data.length;
      (c.stream === "stdout" ? out : err).push(c.data);
    }
    const exit = await p.wait();
    return { stdout_b64: Buffer.concat(out).toString("base64"), stderr_b64: Buffer.concat(err).toString("base64"), ...exit };
  } finally {
    done = true;
  }
}

/** The guest of each sandbox over plain routes: exec (buffered), processes, files, ports. */
export function registerGuestRoutes(app: FastifyInstance, agent: HostAgent): void {
  const base = "/host/v1/sandboxes/:id";
  const guestOf = (req: FastifyRequest) => agent.guest(parseInput(SandboxParams, req.params, "path").id);
  const proc = (req: FastifyRequest) => parseInput(ProcParams, req.params, "path").proc;

  app.post(`${base}/exec`, async (req) => runBuffered(guestOf(req), req, parseInput(host.ExecRequest, req.body, "body")));

  app.post(`${base}/spawn`, async (req) => {
    const b = parseInput(host.ExecRequest, req.body, "body");
    return guestOf(req).spawn(b.command, execOptions(b.options));
  });

  app.get(`${base}/processes`, async (req) => ({ processes: await guestOf(req).processes.list() }));

  app.get(`${base}/processes/:proc/logs`, async (req) => {
    const q = parseInput(LogsQuery, req.query, "query");
    return guestOf(req).processes.read(proc(req), q.channel, q.offset, q.max);
  });

  app.get(`${base}/processes/:proc/wait`, async (req) => guestOf(req).processes.wait(proc(req), parseInput(WaitQuery, req.query, "query").timeout_ms));

  app.post(`${base}/processes/:proc/input`, async (req) => {
    const b = parseInput(host.ProcInput, req.body, "body");
    await guestOf(req).processes.write(proc(req), Buffer.from(b.data_b64, "base64"), b.eof);
    return {};
  });

  app.post(`${base}/processes/:proc/signal`, async (req) => {
    await guestOf(req).processes.signal(proc(req), parseInput(host.ProcSignal, req.body, "body").signal);
    return {};
  });

  app.delete(`${base}/processes/:proc`, async (req) => {
    await guestOf(req).processes.kill(proc(req));
    return {};
  });

  app.get(`${base}/files`, async (req, reply) => {
    const q = parseInput(ReadQuery, req.query, "query");
    const it = guestOf(req).files.readStream(q.path, { ...(q.offset !== undefined ? { offset: q.offset } : {}), ...(q.length !== undefined ? { length: q.length } : {}) });
    // The first chunk before the headers, so a missing file is a clean error response.
    const first = await it.next();
    async function* body(): AsyncGenerator<Buffer> {
      if (!first.done) yield first.value;
      yield* it;
    }
    return reply.type("application/octet-stream").send(Readable.from(body()));
  });

  app.put(`${base}/files`, async (req) => {
    const q = parseInput(WriteQuery, req.query, "query");
    const source = req.body as AsyncIterable<Buffer> | undefined;
    if (!source || typeof source !== "object" || !(Symbol.asyncIterator in source)) throw new DenError("invalid_argument", "a file's bytes come as an application/octet-stream body");
    const bytes = await guestOf(req).files.write(q.path, source, {
      ...(q.mode !== undefined ? { mode: q.mode } : {}), ...(q.parents ? { parents: q.parents === "true" } : {}), ...(q.user !== undefined ? { user: q.user } : {}),
    });
    return { bytes };
  });

  app.get(`${base}/files/stat`, async (req) => guestOf(req).files.stat(parseInput(PathQuery, req.query, "query").path));

  app.get(`${base}/files/list`, async (req) => guestOf(req).files.list(parseInput(PathQuery, req.query, "query").path));

  app.post(`${base}/files/mkdir`, async (req) => {
    const b = parseInput(host.Mkdir, req.body, "body");
    await guestOf(req).files.mkdir(b.path, {
      ...(b.parents !== undefined ? { parents: b.parents } : {}), ...(b.mode !== undefined ? { mode: b.mode } : {}), ...(b.user !== undefined ? { user: b.user } : {}),
    });
    return {};
  });

  app.get(`${base}/files/xattrs`, async (req) => ({ attrs: await guestOf(req).files.getXattrs(parseInput(PathQuery, req.query, "query").path) }));

  app.put(`${base}/files/xattrs`, async (req) => {
    const b = parseInput(host.SetXattrs, req.body, "body");
    await guestOf(req).files.setXattrs(b.path, b.attrs);
    return {};
  });

  app.get(`${base}/metrics`, async (req) => guestOf(req).metrics());

  app.delete(`${base}/files`, async (req) => {
    const q = parseInput(RemoveQuery, req.query, "query");
    await guestOf(req).files.remove(q.path, { recursive: q.recursive === "true" });
    return {};
  });

  app.post(`${base}/files/rename`, async (req) => {
    const b = parseInput(host.Rename, req.body, "body");
    await guestOf(req).files.rename(b.from, b.to);
    return {};
  });

  app.get(`${base}/ports`, async (req) => ({ ports: await guestOf(req).listeningPorts() }));
}
