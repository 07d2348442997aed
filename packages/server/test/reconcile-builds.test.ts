// needs: memory host
import { test } from "node:test";
import assert from "node:assert/strict";
import { host as hostProtocol } from "@den/protocol";
import { memoryServer, waitFor } from "./helpers.js";

test("a reconcile while a template build runs leaves the build's VM alone: the build finishes", async () => {
  const m = await memoryServer();
  try {
    const building = m.api("POST", "/v1/templates", { name: "slow-setup", setup: ["sleep 1.5", "echo built > /root/built"] });
    const buildVm = await waitFor("the build's VM on the host", async () => (await m.host.inventory()).vms.find((v) => v.id.startsWith(`${hostProtocol.BUILD_VM_PREFIX}_`))?.id, 10_000, 20);
    // What a control plane's restart, or a host heard from again, runs: the database knows no such VM.
    await m.server.cp.recovery.reconcileHost(m.server.cp.hosts.first!);
    assert.ok((await m.host.inventory()).vms.some((v) => v.id === buildVm), "the reconcile left the build's VM running");
    const r = await building;
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const sbx = await m.api("POST", "/v1/sandboxes", { template: "slow-setup" });
    assert.equal(sbx.status, 201, JSON.stringify(sbx.body));
    const out = await m.api("POST", `/v1/sandboxes/${sbx.body.id}/exec`, { cmd: "cat /root/built" });
    assert.equal(out.body?.stdout, "built\n", out.text);
  } finally {
    await m.close();
  }
});
