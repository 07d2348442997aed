import { api } from "@den/protocol";
import type { TypedApp } from "../typed-app.js";
import { principal } from "../principal.js";
import type { ControlPlane } from "@den/control-plane";

export function registerUsageRoutes(app: TypedApp, cp: ControlPlane): void {
  app.get("/v1/usage", {
    schema: {
      summary: "Metered usage over a period: seconds per state, reserved vCPU and memory, host CPU used, Den's own work, bytes stored, cost",
      querystring: api.UsageQuery, response: { 200: api.UsageReport },
    },
  }, async (req) => cp.usage(principal(req), req.query));
}
