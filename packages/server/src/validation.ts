import type { FastifySchemaValidationError } from "fastify";

/** A failed schema check as one line for the caller: where (body, querystring, ...) and the first field that is wrong. */
export function validationMessage(err: { validation: FastifySchemaValidationError[]; validationContext?: string }): string {
  const first = err.validation[0];
  const where = first?.instancePath ? `${first.instancePath.slice(1).replace(/\//g, ".")}: ` : "";
  return `${err.validationContext ?? "request"} ${where}${first?.message ?? "is invalid"}`;
}
