// needs: one VM
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import S3rver from "s3rver";
import { client, testServer } from "./helpers.js";

// A cold hibernate streams the state into the store while QEMU writes it: a store that fails
// then fails the snapshot itself, which had paused the VM. The sandbox must run on, data kept.
test("the store going away during a cold hibernate: it fails, and the sandbox keeps running with its data", async () => {
  const dir = mkdtempSync(join(tmpdir(), "den-outage-s3-"));
  const s3 = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: dir, configureBuckets: [{ name: "den" }] });
  const { port } = await s3.run();
  let s3Open = true;
  const server = await testServer({ DEN_STORE: "s3", DEN_S3_BUCKET: "den", DEN_S3_ENDPOINT: `http://127.0.0.1:${port}`, AWS_ACCESS_KEY_ID: "S3RVER", AWS_SECRET_ACCESS_KEY: "S3RVER" });
  const api = client(server.url);
  let id: string | undefined;
  try {
    id = (await api("POST", "/v1/sandboxes", {})).body.id as string;
    assert.equal((await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "echo kept > /tmp/k" })).status, 200);
    await s3.close();
    s3Open = false;
    const h = await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" });
    assert.ok(h.status >= 500, `${h.status} ${h.text}`);
    assert.equal((await api("GET", `/v1/sandboxes/${id}`)).body.state, "running");
    const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /tmp/k" });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.stdout, "kept\n");
    assert.equal((await api("DELETE", `/v1/sandboxes/${id}`)).status, 200);
    id = undefined;
  } finally {
    // A failed check leaves no VM behind.
    if (id) await api("DELETE", `/v1/sandboxes/${id}`).catch(() => undefined);
    await server.close();
    if (s3Open) await s3.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
