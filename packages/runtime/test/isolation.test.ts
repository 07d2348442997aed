// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import type { Runtime, Sandbox } from "../src/index.js";
import { testRuntime } from "./helpers.js";

describe("isolation by default", () => {
  let rt: Runtime;
  let sbx: Sandbox;
  let server: net.Server;
  let accepted = 0;
  before(async () => {
    rt = await testRuntime();
    sbx = await rt.create();
    server = net.createServer((s) => {
      accepted++;
      s.destroy();
    });
    await new Promise<void>((r) => server.listen(0, "0.0.0.0", r));
  });
  after(async () => {
    server?.close();
    await sbx?.destroy();
    rt?.close();
  });

  test("the guest has no route anywhere and cannot reach a host port", async () => {
    const port = (server.address() as net.AddressInfo).port;
    const routes = await sbx.exec("ip -4 route; ip -6 route");
    assert.equal(routes.stdout.toString().trim(), "", "no routes in the guest");
    for (const addr of ["10.0.2.2", "127.0.0.1", "192.168.1.1", "172.17.0.1"]) {
      const r = await sbx.exec(`python3 -c "import socket; s=socket.socket(); s.settimeout(2); s.connect(('${addr}', ${port}))"`);
      assert.notEqual(r.exitCode, 0, `connecting to ${addr}:${port} from the guest must fail`);
    }
    assert.equal(accepted, 0, "the host server never saw a connection");
  });

  test("the guest's NIC exists but leads nowhere", async () => {
    const links = await sbx.exec("ip -o link show | awk -F': ' '{print $2}'");
    const names = links.stdout.toString().trim().split("\n");
    assert.ok(names.includes("lo"));
    assert.ok(names.some((n) => n.startsWith("eth") || n.startsWith("en")), `a virtio NIC is present: ${names}`);
  });

  test("the guest cannot see the host's files or sockets", async () => {
    const r = await sbx.exec(`ls ${sbx.dir} 2>&1; ls /var/lib/den* 2>&1; true`);
    assert.match(r.stdout.toString(), /No such file or directory/);
    assert.doesNotMatch(r.stdout.toString(), /qmp\.sock/);
  });

  test("a fork bomb hits the pids limit; the agent keeps answering", async () => {
    const small = await rt.create({ pidsMax: 64 });
    try {
      // dash, not bash: bash retries a failed fork with backoff until a slot frees (the
      // sleeps' 30 s); dash gives up at once. The sleeps keep no pipe of the exec open.
      const r = await small.exec(["dash", "-c", "for i in $(seq 200); do sleep 30 </dev/null >/dev/null 2>&1 & done; true"], { timeoutMs: 60_000 });
      assert.match(r.stderr.toString(), /Cannot fork|Resource temporarily unavailable/);
      // The agent lives outside the exec cgroup, so it can still start commands.
      const n = Number((await small.exec("pgrep -c -x sleep")).stdout.toString());
      assert.ok(n > 0 && n < 64, `fewer processes than the pids limit ran (${n})`);
      // (The sleeps still fill the limit: pkill runs alone, with no shell to fork it.)
      assert.equal((await small.exec(["pkill", "-x", "sleep"])).exitCode, 0);
      assert.equal((await small.exec("echo fine")).stdout.toString(), "fine\n");
    } finally {
      await small.destroy();
    }
  });

  test("a memory hog is OOM-killed inside the guest; the agent survives", async () => {
    // 600 MB of written (not just reserved) memory in a 512 MB guest.
    const r = await sbx.exec("python3 -c 'x = b\"\\1\" * (600 * 1024**2); print(len(x))'", { timeoutMs: 120_000 });
    assert.equal(r.stdout.toString(), "", "the allocation never completed");
    assert.ok(r.signal === 9 || (r.exitCode ?? 0) > 0, `the hog failed (exit ${r.exitCode}, signal ${r.signal})`);
    assert.equal((await sbx.exec("echo alive")).stdout.toString(), "alive\n");
  });
});
