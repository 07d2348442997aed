import { z } from "zod";
import { api } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import { principal } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";
import { CodeInterpreter } from "../code/interpreter.js";
import { ndjsonStream } from "../ndjson.js";
import { IdParams } from "./params.js";

const CtxParams = z.object({ id: z.string().max(64), ctx: api.CodeContextId });

const UNAVAILABLE = `409 \`code_interpreter_unavailable\` when nothing serves the code interpreter's port (49999) in the sandbox: it was not made from the template \`${api.CODE_INTERPRETER_TEMPLATE}\` (or one built on it).`;

/**
 * The code interpreter (`/v1/sandboxes/{id}/code/...`): runs code in a sandbox made from
 * `code-interpreter-v1`, whose guest server speaks E2B's code-interpreter protocol on port
 * 49999. The run's lines are passed on as they come.
 */
export function registerCodeRoutes(app: TypedApp, cp: ControlPlane): void {
  const code = new CodeInterpreter(cp);

  app.post("/v1/sandboxes/:id/code/execute", {
    schema: {
      summary: "Run code in the sandbox's code interpreter, streaming what it prints and returns as NDJSON lines",
      description: "One CodeStreamLine per line, as they come: `stdout`/`stderr` (`text`), `result` (the MIME forms of a value or display: `text`, `html`, `markdown`, `svg`, `png`/`jpeg`/`pdf` base64, `latex`, `json`, `javascript`, `extra`; `is_main_result`), `error` (`name`, `value`, `traceback`), `number_of_executions`, then `end_of_execution` last (`unexpected_end_of_execution` if the run or Den's connection to it broke off, with Den's `error`). `keepalive` after 15 s of silence. A client that disconnects interrupts the run. The sandbox's env vars (from its create and template) are the code's, plus `env_vars`. 404 `context_not_found` for an unknown `context_id`. " + UNAVAILABLE,
      params: IdParams, body: api.RunCodeRequest,
    },
  }, async (req, reply) => {
    // The response's close: the client gone (or the stream done); either way the guest connection goes.
    const gone = new AbortController();
    reply.raw.once("close", () => gone.abort());
    const run = await code.execute(principal(req), req.params.id, req.body, gone.signal);
    if (gone.signal.aborted) run.close();
    else gone.signal.addEventListener("abort", () => run.close(), { once: true });
    return reply.type("application/x-ndjson").header("cache-control", "no-store").header("x-accel-buffering", "no").send(ndjsonStream(run.lines));
  });

  app.get("/v1/sandboxes/:id/code/contexts", {
    schema: { summary: "The code interpreter's contexts (kernels whose state persists between runs)", description: UNAVAILABLE, params: IdParams, response: { 200: api.ListCodeContextsResponse } },
  }, async (req) => ({ contexts: await code.listContexts(principal(req), req.params.id) }));

  app.post("/v1/sandboxes/:id/code/contexts", {
    schema: { summary: "Start a code context (a kernel of a language, in a working directory)", description: UNAVAILABLE, params: IdParams, body: api.CreateCodeContextRequest.nullish(), response: { 201: api.CodeContext } },
  }, async (req, reply) => reply.status(201).send(await code.createContext(principal(req), req.params.id, req.body ?? {})));

  app.post("/v1/sandboxes/:id/code/contexts/:ctx/restart", {
    schema: { summary: "Restart a code context: its kernel starts over (its variables are gone)", description: `404 \`context_not_found\` for an unknown context. ${UNAVAILABLE}`, params: CtxParams },
  }, async (req, reply) => {
    await code.restartContext(principal(req), req.params.id, req.params.ctx);
    return reply.status(204).send();
  });

  app.delete("/v1/sandboxes/:id/code/contexts/:ctx", {
    schema: { summary: "Remove a code context (its kernel stops)", description: `404 \`context_not_found\` for an unknown context. ${UNAVAILABLE}`, params: CtxParams },
  }, async (req, reply) => {
    await code.removeContext(principal(req), req.params.id, req.params.ctx);
    return reply.status(204).send();
  });
}
