import type { ControlPlane } from "@den/control-plane";
import { E2bMapper } from "./mapping.js";
import { MetricsSeries } from "./metrics.js";
import { E2bService } from "./service.js";
import { E2bTemplateBuilds } from "./templates/builds.js";
import { E2bTemplateCatalog } from "./templates/catalog.js";
import type { E2bTemplates } from "./templates/routes.js";
import { UploadLinks } from "./templates/uploads.js";
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
  templates: E2bTemplates;
  /** The signed links of template file uploads (templates/uploads.ts). */
  uploads: { links: UploadLinks };
}

/**
 * `domain`: E2B's sandbox domain, so that `getHost(port)` (`<port>-<id>.<domain>`) names a
 * host Den's port proxy serves; by default the ports domain with the API's port. Volumes
 * answer it too, so the client's default volume content URL (`https://api.<domain>`) is Den's.
 */
export async function openE2b(cp: ControlPlane, domain: () => string): Promise<E2bSurface> {
  const tokens = await E2bTokens.open(cp);
  const links = await UploadLinks.open(cp);
  const catalog = new E2bTemplateCatalog(cp);
  return {
    tokens, service: new E2bService(cp, catalog), mapper: new E2bMapper(tokens, domain), metrics: new MetricsSeries(cp), volumes: new E2bVolumes(cp, tokens, domain),
    templates: { catalog, builds: new E2bTemplateBuilds(cp, catalog, links) }, uploads: { links },
  };
}
