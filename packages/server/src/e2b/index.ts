import type { ControlPlane } from "../control-plane.js";
import { E2bMapper } from "./mapping.js";
import { MetricsSeries } from "./metrics.js";
import { E2bService } from "./service.js";
import { E2bTokens } from "./tokens.js";
import { E2bVolumes } from "./volumes.js";

export { registerE2bRoutes } from "./routes.js";
export { volumeContentRoutes } from "./volume-content.js";

/** The E2B-compatible surface's parts, built once per server over its control plane. */
export interface E2bSurface {
  tokens: E2bTokens;
  service: E2bService;
  mapper: E2bMapper;
  metrics: MetricsSeries;
  volumes: E2bVolumes;
}

/**
 * `domain`: E2B's sandbox domain, so that `getHost(port)` (`<port>-<id>.<domain>`) names a
 * host Den's port proxy serves; by default the ports domain with the API's port. Volumes
 * answer it too, so the client's default volume content URL (`https://api.<domain>`) is Den's.
 */
export async function openE2b(cp: ControlPlane, domain: () => string): Promise<E2bSurface> {
  const tokens = await E2bTokens.open(cp.store);
  return { tokens, service: new E2bService(cp), mapper: new E2bMapper(tokens, domain), metrics: new MetricsSeries(cp), volumes: new E2bVolumes(cp, tokens, domain) };
}
