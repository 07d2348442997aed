// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

/**
 * The API reference (packages/protocol/API.md) against the OpenAPI document the server
 * generates (committed as packages/server/openapi.json, itself checked against the live
 * server in api.test): every route of one is in the other, with the same method.
 */
test("API.md lists exactly the routes of the OpenAPI document", () => {
  const doc = JSON.parse(readFileSync(new URL("../../openapi.json", import.meta.url), "utf8")) as { paths: Record<string, Record<string, unknown>> };
  const fromSpec = new Set<string>();
  for (const [path, methods] of Object.entries(doc.paths)) for (const m of Object.keys(methods)) fromSpec.add(`${m.toUpperCase()} ${path}`);

  const md = readFileSync(new URL("../../../protocol/API.md", import.meta.url), "utf8");
  const fromDoc = new Set<string>();
  for (const line of md.split("\n")) {
    const m = /^\| ([A-Za-z ()+:-]+?) \| (\/v1\/[^ |]*)/.exec(line);
    if (!m) continue;
    const path = m[2]!.split("?")[0]!;
    const method = m[1]!.trim();
    // "GET (WebSocket)" and "GET + `Upgrade: den-tcp`" are GETs; "any" forwards every method (documented as GET).
    const verb = method === "any" ? "GET" : method.split(/[ (+]/)[0]!.toUpperCase();
    if (method.startsWith("GET +")) continue; // the den-tcp upgrade on the bare port path: an extension of the forwarded route
    fromDoc.add(`${verb} ${path}`);
  }
  const missingInDoc = [...fromSpec].filter((r) => !fromDoc.has(r));
  const missingInSpec = [...fromDoc].filter((r) => !fromSpec.has(r));
  assert.deepEqual(missingInDoc, [], "routes of the OpenAPI document that API.md does not list");
  assert.deepEqual(missingInSpec, [], "routes API.md lists that the OpenAPI document does not have");
});
