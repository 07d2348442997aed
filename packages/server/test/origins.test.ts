// needs: one VM, chromium
/**
 * Guest content never shares an origin with Den (in headless Chromium): a hostile page served
 * by a sandbox, opened from a signed URL (even the API-path form), runs on its port's own
 * origin; from there it cannot register a service worker on the API/dashboard origin, read
 * the API's, envd's or another sandbox's responses, nor open another sandbox's WebSocket.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { client, serverFixture, waitFor } from "./helpers.js";

const CHROMIUM = "/usr/bin/chromium";

/** The hostile page and its service worker (which would answer every request of the origin it controls). */
const EVIL_SERVER = String.raw`
import http.server
PAGE = b"""<!doctype html><title>evil</title><script>
window.report = (async () => {
  const out = {};
  const q = new URLSearchParams(location.search);
  const probe = async (name, f) => { try { out[name] = await f(); } catch (e) { out[name] = "blocked: " + e.name; } };
  await probe("sw", async () => (await navigator.serviceWorker.register("/sw.js", { scope: "/" })).scope);
  await probe("api", async () => { const r = await fetch(q.get("api") + "/v1/sandboxes", { credentials: "include" }); return "read " + r.status + " " + (await r.text()).slice(0, 80); });
  await probe("envd", async () => { const r = await fetch(q.get("envd") + "/health", { credentials: "include" }); return "read " + r.status; });
  await probe("other", async () => { const r = await fetch(q.get("other") + "/secret.txt", { credentials: "include" }); return "read " + r.status + " " + (await r.text()); });
  await probe("otherWs", () => new Promise((resolve, reject) => {
    const w = new WebSocket(q.get("other").replace("http", "ws") + "/socket");
    w.onopen = () => resolve("open"); w.onerror = () => reject(new Error("refused"));
  }));
  out.cookie = document.cookie;
  return out;
})();
</script>"""
SW = b"self.addEventListener('fetch', (e) => e.respondWith(new Response('hijacked by a sandbox')));"
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        path = self.path.split("?")[0]
        body, kind = (SW, "text/javascript") if path == "/sw.js" else (b"secret-of-the-other-sandbox", "text/plain") if path == "/secret.txt" else (PAGE, "text/html")
        self.send_response(200); self.send_header("Content-Type", kind); self.send_header("Content-Length", str(len(body)))
        self.send_header("Service-Worker-Allowed", "/"); self.send_header("Set-Cookie", "guest=1; Path=/")
        self.end_headers(); self.wfile.write(body)
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
`;

describe("origins", () => {
  const f = serverFixture();

  test("in Chromium: a sandbox's page runs on its port's own origin and reaches nothing of Den's or another sandbox's", {
    skip: existsSync(CHROMIUM) ? false : `${CHROMIUM} is missing (Debian's chromium package)`,
    timeout: 300_000,
  }, async () => {
    const { chromium } = await import("playwright-core");
    const created = await f.api("POST", "/v1/keys", { owner: "origins-test" });
    const api = client(f.server.url, created.body.key as string);
    const sandboxes: string[] = [];
    for (let i = 0; i < 2; i++) {
      const id = (await api("POST", "/v1/sandboxes", {})).body.id as string;
      sandboxes.push(id);
      assert.equal((await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: `cat > /root/evil.py <<'EOF'\n${EVIL_SERVER}\nEOF` })).status, 200);
      assert.equal((await api("POST", `/v1/sandboxes/${id}/processes`, { cmd: "python3 /root/evil.py" })).status, 201);
      await waitFor("port 8000", async () => ((await api("GET", `/v1/sandboxes/${id}/ports`)).body.ports.some((p: { port: number }) => p.port === 8000) ? true : undefined), 60_000, 300);
    }
    const [a, b] = sandboxes as [string, string];
    const urlA = (await api("POST", `/v1/sandboxes/${a}/urls`, { port: 8000 })).body as { url: string; path_url: string };
    const urlB = (await api("POST", `/v1/sandboxes/${b}/urls`, { port: 8000 })).body as { url: string };
    const apiOrigin = new URL(f.server.url).origin;
    const otherOrigin = new URL(urlB.url).origin;

    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
    try {
      const context = await browser.newContext();
      // The victim holds B's signed URL too: B's port host has B's cookie in this browser.
      const pb = await context.newPage();
      assert.equal((await pb.goto(urlB.url))?.status(), 200);
      await pb.close();

      // The API-path form of A's signed URL: the browser lands on A's own origin.
      const page = await context.newPage();
      const evil = new URL(urlA.path_url);
      evil.pathname += "evil.html";
      evil.searchParams.set("api", apiOrigin);
      evil.searchParams.set("envd", f.server.envdUrl ?? apiOrigin);
      evil.searchParams.set("other", otherOrigin);
      await page.goto(evil.toString());
      assert.equal(new URL(page.url()).origin, new URL(urlA.url).origin, "the page runs on its port's own origin");
      const report = (await page.evaluate("window.report")) as Record<string, string>;

      assert.equal(new URL(report.sw!).origin, new URL(urlA.url).origin, `its worker's scope is its own origin: ${report.sw}`);
      assert.match(report.api!, /^blocked/, `the API's responses are unreadable: ${report.api}`);
      assert.match(report.envd!, /^blocked/, `envd's responses are unreadable: ${report.envd}`);
      assert.match(report.other!, /^blocked/, `another sandbox's responses are unreadable: ${report.other}`);
      assert.match(report.otherWs!, /^blocked/, `another sandbox's WebSocket is refused: ${report.otherWs}`);
      assert.equal(report.cookie, "guest=1", "its only cookie is its own (Den's token cookie is HttpOnly and host-only)");

      // Den's own origin: no worker of the sandbox's controls it, and its pages are Den's.
      const dash = await context.newPage();
      await dash.goto(`${apiOrigin}/dashboard/`);
      assert.equal(await dash.evaluate("navigator.serviceWorker.getRegistrations().then((r) => r.length)"), 0);
      assert.equal(await dash.evaluate(`fetch("/healthz").then((r) => r.text())`) === "hijacked by a sandbox", false);
      const cookies = await context.cookies(apiOrigin);
      assert.deepEqual(cookies.map((c) => c.name), [], "no cookie on the API's origin");
    } finally {
      await browser.close();
      for (const id of sandboxes) await api("DELETE", `/v1/sandboxes/${id}`);
    }
  });
});
