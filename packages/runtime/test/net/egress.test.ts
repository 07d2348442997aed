import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { DenError } from "@den/protocol";
import { SandboxNetwork, type NetworkEnv } from "../../src/network/sandbox-network.js";
import type { Runtime, Sandbox } from "../../src/index.js";
import { testRuntime } from "../helpers.js";

/**
 * Egress through passt in a per-sandbox namespace, against real microVMs. Runs only
 * inside scripts/netns-test.sh: a namespace with no default route, so nothing here can
 * leave the machine; "the internet" is 198.51.100.10 and 203.0.113.10, and 10.99.0.10 is
 * a private-range server no sandbox may reach.
 */
const insideTestNetns = (() => {
  try {
    return !execFileSync("ip", ["route", "show", "default"], { encoding: "utf8" }).trim() && process.env.DEN_NETNS_TEST === "1";
  } catch {
    return false;
  }
})();

const env: NetworkEnv = { pool: "100.96.0.0/16", hostAddresses: [], hosts: { "allowed.test": "198.51.100.10", "other.test": "203.0.113.10" } };

describe("sandbox egress", { skip: !insideTestNetns && "run through scripts/netns-test.sh" }, () => {
  let rt: Runtime;
  let sbx: Sandbox;
  let net: SandboxNetwork;
  before(async () => {
    rt = await testRuntime();
    sbx = await rt.create({ template: "base" });
  });
  after(async () => {
    await net?.down();
    await sbx?.destroy();
    rt?.close();
  });

  /** `ok <body>` or `fail <curl exit code>`, from inside the guest. */
  const get = async (url: string) => {
    const r = await sbx.exec(`curl -sS -m 3 ${url} && exit 0 || exit $?`, { timeoutMs: 20_000 });
    return r.exitCode === 0 ? `ok ${r.stdout.toString().trim()}` : `fail ${r.exitCode}`;
  };

  test("none: the NIC leads nowhere", async () => {
    assert.match(await get("http://198.51.100.10/"), /^fail/);
  });

  test("open: the internet answers; private ranges and this machine do not; refusals are counted", async () => {
    net = await SandboxNetwork.up(rt.instance, sbx.id, 7, { egress: "open" }, env, sbx.dir);
    assert.equal((await sbx.exec(net.guestSetup())).exitCode, 0);
    assert.equal(await get("http://198.51.100.10/"), "ok net1");
    assert.equal(await get("http://allowed.test/"), "ok net1", "names resolve through Den's DNS");
    assert.match(await get("http://10.99.0.10/"), /^fail/, "a private-range server");
    assert.match(await get(`http://${net.link.host}:80/`), /^fail/, "the host end of its own link");
    assert.match(await get("http://10.0.2.2:53/"), /^fail/, "the router's alias for the host");
    const refused = await net.refused();
    assert.ok(refused.private >= 2, JSON.stringify(refused));
  });

  test("allowlist: one address and one name pass, others are refused; back to none at once", async () => {
    await net.setPolicy({ egress: "allowlist", allow: ["198.51.100.10", "other.test"] });
    assert.equal(await get("http://198.51.100.10/"), "ok net1");
    assert.equal(await get("http://other.test/"), "ok net2", "an allowed name, and the address it resolved to");
    assert.match(await get("http://allowed.test/"), /^fail/, "a name not on the list does not resolve");
    await net.setPolicy({ egress: "allowlist", allow: ["198.51.100.10"] });
    assert.match(await get("http://203.0.113.10/"), /^fail/, "an address not on the list");
    await net.setPolicy({ egress: "none" });
    assert.match(await get("http://198.51.100.10/"), /^fail/);
    await net.setPolicy({ egress: "open" });
    assert.equal(await get("http://198.51.100.10/"), "ok net1");
    assert.ok((await net.refused()).dns >= 1);
  });

  test("a policy that names neither a CIDR nor a domain is refused", () => {
    assert.throws(() => SandboxNetwork.validate({ egress: "allowlist", allow: ["not a host!"] }), (e: unknown) => e instanceof DenError && e.code === "invalid_argument");
  });
});

describe("a sandbox's network through the runtime", { skip: !insideTestNetns && "run through scripts/netns-test.sh" }, () => {
  test("set on a running sandbox, switched off and on, rebuilt after a restart, and gone without a trace on destroy", async () => {
    process.env.DEN_NET_HOSTS = "allowed.test=198.51.100.10";
    let rt = await testRuntime();
    const sbx = await rt.create({ template: "base" });
    const get = async (s: Sandbox, url: string) => (await s.exec(`curl -sS -m 3 ${url}`, { timeoutMs: 20_000 })).exitCode === 0;
    const traces = (id: string) => ({
      netns: execFileSync("ip", ["netns", "list"], { encoding: "utf8" }).includes(`den-${id}`),
      // The router is the QEMU with no machine whose stream leads to this sandbox's NIC socket.
      router: execFileSync("ps", ["-eo", "args"], { encoding: "utf8" }).split("\n").some((l) => l.includes("-M none") && l.includes(`${id}/net.sock`)),
    });
    try {
      assert.equal(await get(sbx, "http://198.51.100.10/"), false);
      await rt.setNetwork(sbx.id, { egress: "allowlist", allow: ["allowed.test"] });
      assert.equal(await get(sbx, "http://allowed.test/"), true);
      assert.equal(await get(sbx, "http://203.0.113.10/"), false);
      await rt.setNetwork(sbx.id, { egress: "none" });
      assert.equal(await get(sbx, "http://198.51.100.10/"), false);
      assert.deepEqual(traces(sbx.id), { netns: false, router: false }, "none tears the network down");
      await rt.setNetwork(sbx.id, { egress: "open" });
      assert.equal(await get(sbx, "http://203.0.113.10/"), true);
      // A restarted runtime adopts the VM and builds its network again.
      rt.close();
      rt = await testRuntime();
      const again = rt.get(sbx.id);
      assert.equal(await get(again, "http://203.0.113.10/"), true, "the network works after a restart");
      await again.destroy();
      assert.deepEqual(traces(sbx.id), { netns: false, router: false });
    } finally {
      await rt.destroyAll();
      rt.close();
    }
  });
});
