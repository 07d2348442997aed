import type { FastifyRequest } from "fastify";
import { z } from "zod";
import { DenError, e2bApi } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import type { Principal } from "@den/control-plane";
import type { E2bVolumes } from "./volumes.js";

const Id = z.object({ volumeID: z.string().max(128) });
const hide = { hide: true } as const;

/**
 * E2B's `/volumes` control routes, inside the E2B API's plugin (its auth hook and error
 * body). Their content is served elsewhere: volume-content.ts, on the envd listener.
 */
export function registerE2bVolumeRoutes(app: TypedApp, volumes: E2bVolumes, who: (req: FastifyRequest) => Principal): void {
  app.get("/volumes", { schema: hide }, async (req) => volumes.list(who(req)));
  app.post("/volumes", { schema: { ...hide, body: e2bApi.NewVolume } }, async (req, reply) => reply.status(201).send(await volumes.create(who(req), req.body)));
  app.get("/volumes/:volumeID", { schema: { ...hide, params: Id } }, async (req) => volumes.info(who(req), req.params.volumeID));
  app.delete("/volumes/:volumeID", { schema: { ...hide, params: Id } }, async (req, reply) => {
    if (!(await volumes.destroy(who(req), req.params.volumeID))) throw new DenError("volume_not_found", `volume ${JSON.stringify(req.params.volumeID)} does not exist`);
    return reply.status(204).send();
  });
}
