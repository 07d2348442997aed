// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { statSync } from "node:fs";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import type { Runtime, Sandbox } from "../src/index.js";
import { rssKb, testRuntime } from "./helpers.js";

/**
 * A guest script that kills the agent and takes over its port to write what `payload` prints.
 * Init starts the agent again at once, and on a busy host it can open the port first (a
 * virtio port has one opener): kill and try again until the port is ours. (`command exec`:
 * a failed open must not end the shell, as a plain `exec` redirection's does.)
 */
function hijackPort(payload: string): string {
  return `setsid sh -c '
    sleep 0.5
    port=/dev/$(basename $(dirname $(grep -l den.agent /sys/class/virtio-ports/*/name)))
    i=0
    while :; do
      for p in $(pidof den-agent); do [ "$p" != 1 ] && kill -9 "$p"; done
      if command exec 3<>"$port"; then break; fi
      i=$((i + 1)); [ $i -lt 100 ] || exit 1
      sleep 0.02
    done
    ${payload} >&3
    sleep 1
  ' >/dev/null 2>&1 < /dev/null &`;
}

async function waitUntilHealthy(sbx: Sandbox, ms = 60_000): Promise<void> {
  const t0 = Date.now();
  for (;;) {
    try {
      const r = await sbx.exec("echo ok");
      if (r.stdout.toString() === "ok\n") return;
    } catch (e) {
      if (!(e instanceof DenError)) throw e;
      if (Date.now() - t0 > ms) throw e;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe("a hostile guest", () => {
  let rt: Runtime;
  let sbx: Sandbox;
  before(async () => {
    rt = await testRuntime();
    sbx = await rt.create();
  });
  after(async () => {
    await sbx?.destroy();
    rt?.close();
  });

  test("garbage on the agent channel drops the connection, not the host; the agent comes back", async () => {
    const before = rssKb();
    await sbx.exec(hijackPort("head -c 20000000 /dev/urandom"));
    await new Promise((r) => setTimeout(r, 3000));
    await waitUntilHealthy(sbx);
    assert.ok(sbx.agentProtocolErrors >= 1, "the garbage reached the host and was refused");
    assert.ok(rssKb() - before < 64 * 1024, "host memory stays bounded");
  });

  test("a frame header claiming 1 GB is refused at the header", async () => {
    const before = rssKb();
    const errorsBefore = sbx.agentProtocolErrors;
    // length 0x40000000, type DATA, id 1, then a stream of bytes that never completes the frame.
    await sbx.exec(hijackPort("{ printf \"\\\\100\\\\000\\\\000\\\\000\\\\004\\\\000\\\\000\\\\000\\\\001\"; head -c 50000000 /dev/zero; }"));
    await new Promise((r) => setTimeout(r, 3000));
    await waitUntilHealthy(sbx);
    assert.ok(sbx.agentProtocolErrors > errorsBefore);
    assert.match(sbx.lastAgentError ?? "", /bad frame length|SYNC/);
    assert.ok(rssKb() - before < 64 * 1024, "host memory stays bounded");
  });

  test("a console flood is capped on disk and costs no host memory", async () => {
    const before = rssKb();
    const size = (f: string) => {
      try {
        return statSync(join(sbx.dir, f)).size;
      } catch {
        return 0;
      }
    };
    // Until the log has rotated (how long that takes depends on how busy the host is), then a while more.
    await sbx.exec("nohup timeout 120 sh -c 'cat /dev/urandom > /dev/ttyS0' >/dev/null 2>&1 &");
    const deadline = Date.now() + 120_000;
    while (size("console.log.1") === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    await new Promise((r) => setTimeout(r, 2_000));
    await sbx.exec("pkill -f 'cat /dev/urandom' || true");
    const total = size("console.log") + size("console.log.1");
    assert.ok(total > 1024 * 1024, `the flood filled the log past one rotation (${total} bytes)`);
    assert.ok(total <= 2 * 1024 * 1024, `console log is ${total} bytes`);
    assert.ok(rssKb() - before < 64 * 1024);
    assert.equal((await sbx.exec("echo still-fine")).stdout.toString(), "still-fine\n");
  });
});
