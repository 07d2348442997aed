import { z } from "zod";
import { DenError, api, type GuestCommand, type GuestExecOptions } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import { principal } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";
import { IdParams } from "./params.js";
import type { SandboxRow } from "@den/control-plane";
import { ndjsonStream } from "../ndjson.js";

const ProcParams = z.object({ id: z.string().max(64), proc: z.coerce.number().int().min(1) });

function command(body: { cmd?: string | undefined; argv?: string[] | undefined }): GuestCommand {
  return body.cmd ?? body.argv!;
}

/**
 * Request fields -> guest exec options: the env and working directory as the guests' service
 * sets them up (the sandbox's env under the request's, the template's cwd unless it names
 * one; root, as /v1 always ran).
 */
function execOptions(cp: ControlPlane, row: SandboxRow, body: z.infer<typeof api.ExecRequest>): GuestExecOptions {
  const opts: GuestExecOptions = cp.guests.command(row, { env: body.env, cwd: body.cwd });
  if (body.stdin_b64 !== undefined) opts.stdin = Buffer.from(body.stdin_b64, "base64");
  if (body.timeout_seconds) opts.timeoutMs = body.timeout_seconds * 1000;
  return opts;
}

/** Text when the bytes are valid UTF-8; otherwise text with replacement characters plus the exact bytes. */
function textOf(b: Buffer): { text: string; b64?: string } {
  const text = b.toString("utf8");
  return Buffer.from(text, "utf8").equals(b) ? { text } : { text, b64: b.toString("base64") };
}

function procInfo(p: { proc: number; pid: number; running: boolean; exit_code: number | null; signal: number | null; timed_out: boolean }): api.ProcessInfo {
  return { proc: p.proc, pid: p.pid, running: p.running, exit_code: p.exit_code, signal: p.signal, timed_out: p.timed_out };
}

export function registerExecRoutes(app: TypedApp, cp: ControlPlane): void {
  app.post("/v1/sandboxes/:id/exec", {
    schema: { summary: "Run a command to completion; returns its output and exit code", params: IdParams, body: api.ExecRequest, response: { 200: api.ExecResult } },
  }, async (req) => {
    const { row, guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    const t0 = performance.now();
    const cmd = command(req.body);
    await cp.guests.execStarted(row.id, cmd);
    const r = await cp.slots.bufferedExecs.with(row.owner, () =>
      cp.activity.withExec(row.id, () => guest.exec(cmd, { ...execOptions(cp, row, req.body), maxOutputBytes: cp.config.limits.execOutputBytes })));
    await cp.guests.execEnded(row.id, r);
    const out = textOf(r.stdout);
    const err = textOf(r.stderr);
    return {
      stdout: out.text, stderr: err.text,
      ...(out.b64 ? { stdout_b64: out.b64 } : {}), ...(err.b64 ? { stderr_b64: err.b64 } : {}),
      exit_code: r.exitCode, signal: r.signal, timed_out: r.timedOut, duration_ms: Math.round(performance.now() - t0),
    };
  });

  app.post("/v1/sandboxes/:id/exec/stream", {
    schema: { summary: "Run a command, streaming its output as NDJSON lines (start, stdout/stderr chunks, exit)", params: IdParams, body: api.ExecRequest },
  }, async (req, reply) => {
    const { row, guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    const cmd = command(req.body);
    const release = cp.slots.streams.take(row.owner);
    let p: Awaited<ReturnType<typeof guest.execStream>>;
    try {
      p = await guest.execStream(cmd, execOptions(cp, row, req.body));
    } catch (e) {
      release();
      throw e;
    }
    // The response's close (its end, or the client gone): a request's own close comes as soon as its body is read.
    reply.raw.once("close", release);
    await cp.guests.execStarted(row.id, cmd, { streamed: true });
    // A client that goes away takes its command with it.
    let finished = false;
    reply.raw.on("close", () => {
      if (!finished) p.kill().catch(() => undefined);
    });
    async function* lines(): AsyncGenerator<string> {
      yield JSON.stringify({ type: "start", pid: p.pid }) + "\n";
      try {
        for await (const c of p) yield JSON.stringify({ type: c.stream, data_b64: c.data.toString("base64") }) + "\n";
        const exit = await p.wait();
        finished = true;
        await cp.guests.execEnded(row.id, exit);
        yield JSON.stringify({ type: "exit", exit_code: exit.exitCode, signal: exit.signal, timed_out: exit.timedOut }) + "\n";
      } catch (e) {
        finished = true;
        const err = e instanceof DenError ? e : new DenError("internal", "exec failed");
        yield JSON.stringify({ type: "error", error: { code: err.code, message: err.message } }) + "\n";
      } finally {
        release();
      }
    }
    const stream = ndjsonStream(cp.activity.withExecStream(row.id, lines()));
    return reply.type("application/x-ndjson").header("cache-control", "no-store").send(stream);
  });

  app.post("/v1/sandboxes/:id/processes", {
    schema: { summary: "Start a background process (output kept in ring buffers)", params: IdParams, body: api.StartProcessRequest, response: { 201: api.ProcessInfo } },
  }, async (req, reply) => {
    const { row, guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    const opts = { ...execOptions(cp, row, req.body), interactive: true, ...(req.body.buffer_bytes ? { bufferBytes: req.body.buffer_bytes } : {}) };
    const started = await guest.spawn(command(req.body), opts);
    await cp.guests.execStarted(row.id, undefined, { background: true, proc: started.proc });
    return reply.status(201).send({ proc: started.proc, pid: started.pid, running: true, exit_code: null, signal: null, timed_out: false });
  });

  app.get("/v1/sandboxes/:id/processes", {
    schema: { summary: "List processes started in the sandbox", params: IdParams, response: { 200: z.object({ processes: z.array(api.ProcessInfo) }) } },
  }, async (req) => {
    const { guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    return { processes: (await guest.processes.list()).map(procInfo) };
  });

  app.get("/v1/sandboxes/:id/processes/:proc", {
    schema: {
      summary: "A process's status; waits up to wait_seconds for it to exit",
      params: ProcParams, querystring: z.object({ wait_seconds: z.coerce.number().min(0).max(300).optional() }), response: { 200: api.ProcessInfo },
    },
  }, async (req) => {
    const { guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    const waited = await guest.processes.wait(req.params.proc, (req.query.wait_seconds ?? 0) * 1000);
    const info = (await guest.processes.list()).find((p) => p.proc === req.params.proc);
    if (!info) throw new DenError("proc_not_found", `process ${req.params.proc} does not exist`);
    return procInfo({ ...info, running: waited.running });
  });

  app.get("/v1/sandboxes/:id/processes/:proc/logs", {
    schema: {
      summary: "Output of a background process from an offset",
      params: ProcParams,
      querystring: z.object({ stream: z.enum(["stdout", "stderr"]).optional(), offset: z.coerce.number().int().min(0).optional(), max_bytes: z.coerce.number().int().min(1).max(512 * 1024).optional() }),
      response: { 200: api.ProcessLogs },
    },
  }, async (req) => {
    const { guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    const r = await guest.processes.read(req.params.proc, req.query.stream ?? "stdout", req.query.offset ?? 0, req.query.max_bytes ?? 256 * 1024);
    return { data_b64: r.data, offset: r.offset, next_offset: r.next_offset, dropped: r.dropped, eof: r.eof };
  });

  app.post("/v1/sandboxes/:id/processes/:proc/input", {
    schema: { summary: "Write to a background process's stdin", params: ProcParams, body: api.ProcessInputRequest },
  }, async (req, reply) => {
    const { guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    await guest.processes.write(req.params.proc, Buffer.from(req.body.data_b64, "base64"), req.body.eof ?? false);
    return reply.status(204).send();
  });

  app.delete("/v1/sandboxes/:id/processes/:proc", {
    schema: { summary: "Kill a process and everything it started", params: ProcParams },
  }, async (req, reply) => {
    const { guest } = await cp.guests.reachOwned(principal(req), req.params.id);
    await guest.processes.kill(req.params.proc);
    return reply.status(204).send();
  });
}
