import { z } from "zod";
import type { WebSocket } from "ws";
import { DenError, type GuestExecProcess } from "@den/protocol";
import { pacedInput } from "@den/host-agent";
import type { TypedApp } from "../typed-app.js";
import { principal } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";
import { IdParams } from "./params.js";

const ClientMessage = z.discriminatedUnion("type", [
  z.object({ type: z.literal("resize"), rows: z.number().int().min(1).max(1000), cols: z.number().int().min(1).max(1000) }),
  z.object({ type: z.literal("signal"), signal: z.number().int().min(1).max(64) }),
]);

/** Input the client may send before its process has started (ws had read it before the pause). */
const EARLY_INPUT_MAX = 1024 * 1024;

/**
 * Interactive exec on a pseudo-terminal over a WebSocket. Binary messages carry bytes
 * (client -> stdin, server -> terminal output); text messages carry JSON control:
 * `{type:"resize",rows,cols}` and `{type:"signal",signal}` from the client,
 * `{type:"exit",exit_code,signal}` or `{type:"error",error}` from the server before it closes.
 */
export function registerPtyRoutes(app: TypedApp, cp: ControlPlane): void {
  app.get("/v1/sandboxes/:id/pty", {
    websocket: true,
    schema: {
      summary: "Interactive shell on a PTY (WebSocket)",
      params: IdParams,
      querystring: z.object({
        cmd: z.string().max(4096).optional(),
        cwd: z.string().max(4096).optional(),
        rows: z.coerce.number().int().min(1).max(1000).optional(),
        cols: z.coerce.number().int().min(1).max(1000).optional(),
      }),
    },
  }, async (socket: WebSocket, req) => {
    const fail = (e: unknown) => {
      const err = e instanceof DenError ? e : new DenError("internal", "pty failed");
      if (socket.readyState === socket.OPEN) socket.send(JSON.stringify({ type: "error", error: { code: err.code, message: err.message } }));
      socket.close(1011);
    };
    // Nothing is read until the process exists (TCP holds the client back meanwhile); then
    // stdin is paced by the guest's credit (pacedInput), so a flood grows no buffer here.
    socket.pause();
    let proc: GuestExecProcess | undefined;
    let stdin: ReturnType<typeof pacedInput> | undefined;
    // What ws had already read when it was paused waits here, in order (bounded).
    const early: Array<[Buffer, boolean]> = [];
    let earlyBytes = 0;
    const handle = (data: Buffer | string, isBinary: boolean) => {
      if (!proc || !stdin) {
        const b = Buffer.from(data as Buffer);
        if ((earlyBytes += b.length) > EARLY_INPUT_MAX) return fail(new DenError("payload_too_large", `more than ${EARLY_INPUT_MAX} bytes of input before the process started`));
        early.push([b, isBinary]);
        return;
      }
      if (isBinary) {
        stdin.push(Buffer.from(data as Buffer));
        return;
      }
      let msg: z.infer<typeof ClientMessage>;
      try {
        msg = ClientMessage.parse(JSON.parse(data.toString()));
      } catch {
        socket.send(JSON.stringify({ type: "error", error: { code: "invalid_argument", message: "unknown control message" } }));
        return;
      }
      const p = msg.type === "resize" ? proc.resize(msg.rows, msg.cols) : proc.signal(msg.signal);
      p.catch(() => undefined);
    };
    socket.on("message", (data: Buffer, isBinary: boolean) => handle(data, isBinary));
    try {
      const { row, guest } = await cp.guests.reachOwned(principal(req), req.params.id);
      socket.once("close", cp.slots.streams.take(row.owner));
      const q = req.query;
      const env = { ...(JSON.parse(row.env) as Record<string, string>) };
      proc = await guest.execStream(q.cmd ?? "exec /bin/bash -l", {
        pty: { rows: q.rows ?? 24, cols: q.cols ?? 80 }, env, ...(q.cwd ? { cwd: q.cwd } : {}),
      });
      const p = proc;
      socket.on("close", () => {
        p.kill().catch(() => undefined);
      });
      stdin = pacedInput(socket, (b) => p.write(b));
      for (const [b, isBinary] of early.splice(0)) handle(b, isBinary);
      socket.resume();
      await cp.activity.withExec(row.id, async () => {
        for await (const c of p) {
          if (socket.readyState !== socket.OPEN) break;
          await new Promise<void>((resolve) => socket.send(c.data, () => resolve()));
        }
      });
      const exit = await p.wait();
      if (socket.readyState === socket.OPEN) {
        socket.send(JSON.stringify({ type: "exit", exit_code: exit.exitCode, signal: exit.signal }));
        socket.close(1000);
      }
    } catch (e) {
      fail(e);
    }
  });
}
