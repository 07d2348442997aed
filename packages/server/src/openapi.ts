/** Writes the OpenAPI document (the contract SDK and CLI share) to packages/server/openapi.json. */
import { writeFileSync } from "node:fs";
import { buildApp } from "./app.js";
import { loadConfig } from "./config.js";
import type { ControlPlane } from "@den/control-plane";

// Route handlers never run here: generating the document needs only the routes' schemas.
// (The port-URL secret is the one setting building the app reads: a throwaway one.)
const store = { setting: async (_key: string, make: () => string) => make() };
const app = await buildApp({ config: loadConfig({}, {}), store, setting: store.setting } as unknown as ControlPlane);
await app.ready();
writeFileSync(new URL("../../openapi.json", import.meta.url), JSON.stringify(app.swagger(), null, 2) + "\n");
await app.close();
