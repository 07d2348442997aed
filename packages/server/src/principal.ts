import type { FastifyRequest } from "fastify";
import { DenError } from "@den/protocol";
import type { Principal } from "@den/control-plane";

declare module "fastify" {
  interface FastifyRequest {
    /** Who is calling: set by the app's auth hook from the request's API key. */
    principal?: Principal;
  }
}

/** The caller of a /v1 route (401 without a key). */
export function principal(req: FastifyRequest): Principal {
  if (!req.principal) throw new DenError("unauthorized", "missing API key");
  return req.principal;
}

/** The caller of an admin route (403 for an owner's key). */
export function requireAdmin(req: FastifyRequest): Principal {
  const p = principal(req);
  if (!p.admin) throw new DenError("forbidden", "this route needs an admin key");
  return p;
}
