import type { FastifyError, FastifyInstance, FastifyReply } from "fastify";
import { hasZodFastifySchemaValidationErrors } from "fastify-type-provider-zod";
import { DenError, type e2bApi } from "@den/protocol";
import { validationMessage } from "../validation.js";

/** E2B's error body, `{code: <status>, message}` (the client reads `code`). */
export function sendE2bError(reply: FastifyReply, status: number, message: string): FastifyReply {
  return reply.status(status).send({ code: status, message } satisfies e2bApi.ErrorBody);
}

/** Every error of a scope of E2B routes in E2B's body: Den's errors by their status, a schema's as 400, the rest 500. */
export function useE2bErrors(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError | Error, req, reply) => {
    if (err instanceof DenError) return sendE2bError(reply, err.status, err.message);
    if (hasZodFastifySchemaValidationErrors(err)) return sendE2bError(reply, 400, validationMessage(err));
    const fe = err as FastifyError;
    if (fe.statusCode && fe.statusCode >= 400 && fe.statusCode < 500) return sendE2bError(reply, fe.statusCode, fe.message);
    req.log.error({ err }, "unhandled error in the E2B API");
    return sendE2bError(reply, 500, "internal error");
  });
}
