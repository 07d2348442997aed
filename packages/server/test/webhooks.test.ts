// needs: memory host
/**
 * Lifecycle webhooks, on the in-memory host (delivery is the control plane's alone; the CLI's
 * test adds a webhook against real microVMs): a receiver on loopback (the
 * operator allows 127.0.0.2 only) hears one sandbox's whole life in order, each delivery
 * signed (checked with the Standard Webhooks library's own verify), through 30 s of the
 * receiver being down; internal URLs are refused.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { Socket } from "node:net";
import { Webhook } from "standardwebhooks";
import { client, memoryServer, sandboxCalls, waitFor, type MemoryServer } from "./helpers.js";

const RECEIVER_HOST = "127.0.0.2";

/** A webhook receiver that can go down (connections refused) and come back on its port. */
class Receiver {
  readonly got: Array<{ headers: IncomingHttpHeaders; body: string }> = [];
  private server: Server | undefined;
  private sockets = new Set<Socket>();
  port = 0;

  async up(): Promise<void> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        this.got.push({ headers: req.headers, body: Buffer.concat(chunks).toString() });
        res.end("ok");
      });
    });
    this.server.on("connection", (s) => {
      this.sockets.add(s);
      s.on("close", () => this.sockets.delete(s));
    });
    await new Promise<void>((r) => this.server!.listen(this.port, RECEIVER_HOST, r));
    this.port = (this.server.address() as { port: number }).port;
  }

  async down(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((r) => this.server?.close(r));
    this.server = undefined;
  }
}

describe("webhooks", () => {
  let m: MemoryServer;
  let api: ReturnType<typeof client>;
  const receiver = new Receiver();

  before(async () => {
    await receiver.up();
    m = await memoryServer({
      DEN_WEBHOOK_ALLOW_NETWORKS: `${RECEIVER_HOST}/32`, DEN_WEBHOOK_FIRST_BACKOFF_MS: "500", DEN_WEBHOOK_MAX_BACKOFF_SECONDS: "2",
      DEN_COLD_AFTER_SECONDS: "2", DEN_MAX_SANDBOXES_PER_OWNER: "2",
    });
    api = m.api;
  });
  after(async () => {
    await receiver.down();
    await m?.close();
  });

  test("internal URLs are refused with a 400; nothing is sent there", async () => {
    for (const url of ["http://10.0.0.1/hook", "http://localhost:9/hook", "http://[::1]:9/hook", "http://169.254.169.254/latest", "ftp://example.com/x"]) {
      const r = await api("POST", "/v1/webhooks", { url });
      assert.equal(r.status, 400, `${url}: ${r.text}`);
      assert.equal(r.body.error.code, "invalid_argument");
    }
    assert.match((await api("POST", "/v1/webhooks", { url: "http://localhost:9/hook" })).body.error.message, /resolves to 127\.0\.0\.1/);
    const urls = ((await api("GET", "/v1/webhooks")).body.webhooks as Array<{ url: string }>).map((h) => h.url);
    assert.ok(!urls.some((u) => /10\.0\.0\.1|localhost|::1|169\.254|ftp:/.test(u)), urls.join(" "));
  });

  test("one sandbox's life, in order, signed, through 30 s of the receiver down; none delivered twice", async () => {
    const created = await api("POST", "/v1/webhooks", { url: `http://${RECEIVER_HOST}:${receiver.port}/hook`, description: "test" });
    assert.equal(created.status, 201, created.text);
    const { id: hookId, secret } = created.body as { id: string; secret: string };
    assert.match(secret, /^whsec_/);
    assert.equal((await api("GET", `/v1/webhooks/${hookId}`)).body.secret, undefined, "the secret is shown once");
    const verifier = new Webhook(secret);
    const payloads = () => receiver.got.map((g) => verifier.verify(g.body, g.headers as Record<string, string>) as { type: string; data: Record<string, unknown> });
    const { exec } = sandboxCalls(api);

    // Idle after 2 s: warm by the idle reaper, then cold 2 s later.
    const a = (await api("POST", "/v1/sandboxes", { idle_timeout_seconds: 2 })).body.id as string;
    await waitFor("the created event", async () => (payloads().some((p) => p.type === "sandbox.created" && p.data.sandbox_id === a) ? true : undefined));
    await receiver.down();
    const downAt = Date.now();
    await waitFor("cold hibernation by the idle reaper", async () => {
      const s = (await api("GET", `/v1/sandboxes/${a}`)).body;
      return s.state === "hibernated" && s.hibernate_mode === "cold" ? s : undefined;
    }, 60_000);
    assert.equal(await exec(a, "echo woken"), "woken\n");
    const fork = await api("POST", `/v1/sandboxes/${a}/fork`, {});
    assert.equal(fork.status, 201, fork.text);
    const child = fork.body.sandboxes[0].id as string;
    // The owner may hold two: a third is refused before any sandbox exists.
    const refused = await api("POST", "/v1/sandboxes", {});
    assert.equal(refused.status, 429, refused.text);
    assert.equal((await api("POST", `/v1/sandboxes/${a}/timeout`, { seconds: 2 })).status, 200);
    await waitFor("the TTL", async () => ((await api("GET", `/v1/sandboxes/${a}`)).body.state === "destroyed" ? true : undefined), 30_000);
    assert.equal((await api("DELETE", `/v1/sandboxes/${child}`)).status, 200);
    const pending = (await api("GET", `/v1/webhooks/${hookId}/deliveries?status=pending`)).body.deliveries as Array<{ attempts: number }>;
    assert.ok(pending.length >= 6 && pending.some((d) => d.attempts > 0), `deliveries wait while the receiver is down: ${JSON.stringify(pending)}`);
    await new Promise((r) => setTimeout(r, Math.max(0, 30_000 - (Date.now() - downAt))));
    await receiver.up();

    // Every event of each sandbox's life, in the order Den's own event log has them, with their reasons.
    const lifecycle = new Set(["running", "hibernated", "destroyed", "forked"]);
    const typeOf: Record<string, string> = { hibernated: "sandbox.hibernated", destroyed: "sandbox.destroyed", forked: "sandbox.forked" };
    const of = (id: string) => payloads().filter((p) => p.data.sandbox_id === id);
    const told = async (id: string) => {
      const events = ((await api("GET", `/v1/sandboxes/${id}/events`)).body.events as Array<{ type: string; reason: string | null; data: Record<string, unknown> }>)
        .filter((e) => lifecycle.has(e.type));
      await waitFor(`every event of ${id}`, async () => (of(id).length >= events.length ? true : undefined), 30_000);
      assert.deepEqual(of(id).map((p) => `${p.type}/${p.data.reason ?? "-"}/${p.data.mode ?? "-"}`), events.map((e, i) => {
        const type = e.type === "running" ? (i === 0 ? "sandbox.created" : "sandbox.woken") : typeOf[e.type];
        return `${type}/${e.reason ?? "-"}/${e.data.mode ?? "-"}`;
      }));
      return of(id);
    };
    const ofA = () => of(a);
    await told(a);
    // The milestones the test made happen, in that order.
    const seq = ofA().map((p) => `${p.type}:${p.data.reason ?? ""}:${p.data.mode ?? ""}`);
    const at = (s: string, from = 0) => seq.indexOf(s, from);
    const warm = at("sandbox.hibernated:idle:warm");
    const cold = at("sandbox.hibernated:idle:cold", warm);
    const woken = at("sandbox.woken:user:cold", cold);
    const forked = seq.findIndex((s, i) => i > woken && s.startsWith("sandbox.forked"));
    const ttl = at("sandbox.destroyed:ttl:", forked);
    assert.ok(at("sandbox.created:user:") === 0 && warm > 0 && cold > warm && woken > cold && forked > woken && ttl === seq.length - 1, seq.join(" "));
    assert.deepEqual(ofA()[forked]!.data.children, [child]);
    const ofChild = await told(child);
    assert.deepEqual([ofChild[0]!.type, ofChild[0]!.data.via, ofChild[0]!.data.forked_from], ["sandbox.created", "fork", a]);
    assert.equal(`${ofChild.at(-1)!.type}/${ofChild.at(-1)!.data.reason}`, "sandbox.destroyed/user");
    const refusal = await waitFor("the refusal", async () => payloads().find((p) => p.type === "sandbox.refused"), 30_000);
    assert.equal(refusal.data.code, "quota_exceeded");
    assert.equal(refusal.data.sandbox_id, undefined);

    // None twice: one delivery per message, each delivered once and received once.
    await waitFor("nothing pending", async () => ((await api("GET", `/v1/webhooks/${hookId}/deliveries?status=pending`)).body.deliveries.length === 0 ? true : undefined), 30_000);
    const log = (await api("GET", `/v1/webhooks/${hookId}/deliveries?limit=200`)).body.deliveries as Array<{ id: string; message_id: string; status: string; attempts: number }>;
    assert.ok(log.every((d) => d.status === "delivered"), JSON.stringify(log));
    assert.equal(new Set(log.map((d) => d.message_id)).size, log.length);
    const received = receiver.got.map((g) => g.headers["webhook-id"]);
    assert.equal(new Set(received).size, received.length, "each message received once");
    assert.deepEqual(new Set(received), new Set(log.map((d) => d.message_id)));
    assert.ok(log.some((d) => d.attempts > 1), "some were retried");

    // A redelivery: the same message id again, signed afresh.
    const first = log.at(-1)!;
    const again = await api("POST", `/v1/webhooks/${hookId}/deliveries/${first.id}/redeliver`);
    assert.equal(again.status, 202, again.text);
    await waitFor("the redelivery", async () => (receiver.got.filter((g) => g.headers["webhook-id"] === first.message_id).length === 2 ? true : undefined));
    payloads();
    assert.equal((await api("POST", `/v1/webhooks/${hookId}/deliveries/whd_aaaaaaaaaaaaaaaa/redeliver`)).status, 404);

    // Another owner sees none of it; deleting takes the log with it.
    const other = client(m.server.url, (await api("POST", "/v1/keys", { owner: "someone-else" })).body.key);
    assert.equal((await other("GET", `/v1/webhooks/${hookId}`)).status, 404);
    assert.equal((await other("GET", `/v1/webhooks/${hookId}/deliveries`)).status, 404);
    assert.equal((await other("DELETE", `/v1/webhooks/${hookId}`)).status, 404);
    assert.equal((await api("DELETE", `/v1/webhooks/${hookId}`)).status, 204);
    assert.equal((await api("GET", `/v1/webhooks/${hookId}/deliveries`)).status, 404);
  });
});
