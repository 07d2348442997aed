// needs: one VM, chromium
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { existsSync, mkdirSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { assetsDir } from "@den/dashboard";
import { adminProbeRefused, client, serverFixture, waitFor } from "./helpers.js";

const CHROMIUM = "/usr/bin/chromium";

/** A GET with the path sent byte for byte (fetch and URL would resolve `..` and `%2e%2e` first). */
function rawGet(base: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path, method: "GET", headers }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]));
}

describe("web dashboard", () => {
  const f = serverFixture();

  test("is served without auth at /dashboard/ (and / redirects there), every asset with its type and no-cache", async () => {
    for (const path of ["/", "/dashboard"]) {
      const r = await rawGet(f.server.url, path);
      assert.equal(r.status, 302, path);
      assert.equal(r.headers.location, "/dashboard/", path);
    }
    const index = await rawGet(f.server.url, "/dashboard/");
    assert.equal(index.status, 200);
    assert.equal(index.headers["content-type"], "text/html; charset=utf-8");
    assert.equal(index.headers["cache-control"], "no-cache");
    assert.match(index.headers["content-security-policy"] as string, /default-src 'self'/);
    assert.match(index.body, /<script type="module" src="\/dashboard\/js\/app\.js"><\/script>/);
    assert.equal((await rawGet(f.server.url, "/dashboard/?x=1")).body, index.body);

    const types: Record<string, string> = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml" };
    const all = files(assetsDir);
    assert.ok(all.length >= 10, `assets: ${all.length}`);
    for (const file of all) {
      const rel = relative(assetsDir, file).split("\\").join("/");
      const ext = rel.slice(rel.lastIndexOf("."));
      assert.ok(types[ext], `unexpected asset type ${rel}`);
      const r = await rawGet(f.server.url, `/dashboard/${rel}`);
      assert.equal(r.status, 200, rel);
      assert.equal(r.headers["content-type"], types[ext], rel);
      assert.equal(r.headers["cache-control"], "no-cache", rel);
      assert.equal(r.body, readFileSync(file, "utf8"), rel);
      // The browser loads only Den's files: no CDN, no remote module or stylesheet.
      assert.doesNotMatch(r.body, /(?:src|href)=["']?(?:https?:)?\/\/|from\s+["'](?:https?:)?\/\/|import\(\s*["'](?:https?:)?\/\/|@import|url\(\s*["']?(?:https?:)?\/\//, rel);
    }
    const etag = (await rawGet(f.server.url, "/dashboard/js/app.js")).headers.etag as string;
    assert.ok(etag);
    assert.equal((await rawGet(f.server.url, "/dashboard/js/app.js", { "if-none-match": etag })).status, 304);
  });

  test("serves nothing outside its directory", async () => {
    const attempts = [
      "/dashboard/../package.json",
      "/dashboard/../../server/package.json",
      "/dashboard/%2e%2e/package.json",
      "/dashboard/%2E%2E/package.json",
      "/dashboard/..%2fpackage.json",
      "/dashboard/..%2Fpackage.json",
      "/dashboard/%2e%2e%2fpackage.json",
      "/dashboard/..%5cpackage.json",
      "/dashboard/%252e%252e/package.json",
      "/dashboard/js/../../package.json",
      "/dashboard/js/%2e%2e/%2e%2e/package.json",
      "/dashboard/%2fetc%2fpasswd",
      "/dashboard//etc/passwd",
      "/dashboard/js/app.js%00.html",
      "/dashboard/.%2e/package.json",
      "/dashboard/./index.html",
      "/dashboard/missing.js",
      "/dashboard/js",
    ];
    for (const path of attempts) {
      const r = await rawGet(f.server.url, path);
      assert.equal(r.status, 404, `${path}: ${r.status} ${r.body.slice(0, 80)}`);
      assert.equal(JSON.parse(r.body).error.code, "not_found", path);
      assert.doesNotMatch(r.body, /"name"|"version"|root:/, path);
    }
    // Malformed escapes never reach the route.
    assert.equal((await rawGet(f.server.url, "/dashboard/%e0%a4%a")).status, 400);
  });

  test("stays out of the API's documents", async () => {
    const doc = (await f.api("GET", "/openapi.json")).body as { paths: Record<string, unknown> };
    const paths = Object.keys(doc.paths);
    assert.ok(paths.length > 10);
    assert.ok(paths.every((p) => p.startsWith("/v1/")), paths.join(" "));
    assert.ok(f.server.app.denRoutes.every((r) => r.url.startsWith("/v1/")), JSON.stringify(f.server.app.denRoutes.filter((r) => !r.url.startsWith("/v1/"))));
  });

  test("in Chromium: sign in, live table and filters, detail (ports, fork tree, usage), hibernate, timeline, destroy", {
    skip: existsSync(CHROMIUM) ? false : `${CHROMIUM} is missing (Debian's chromium package; scripts/install-deps.sh installs it)`,
    timeout: 600_000,
  }, async () => {
    const { chromium } = await import("playwright-core");
    // A user's own key, not the admin's: what the dashboard is for.
    const created = await f.api("POST", "/v1/keys", { owner: "dashboard-test" });
    assert.equal(created.status, 201, created.text);
    const key = created.body.key as string;
    const api = client(f.server.url, key);
    const origin = new URL(f.server.url).origin;
    const problems: string[] = [];
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      page.setDefaultTimeout(60_000);
      let badKeyPhase = true;
      page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
      page.on("console", (m) => {
        if (m.type() === "error" && !(badKeyPhase && /401/.test(m.text())) && !adminProbeRefused(m)) problems.push(`console: ${m.text()}`);
      });
      // What the page was told, for a failure's message (a wait that times out says only what it waited for).
      const responses: string[] = [];
      page.on("response", (r) => {
        const u = new URL(r.url());
        if (u.pathname.startsWith("/v1/") && r.request().method() !== "GET") responses.push(`${r.request().method()} ${u.pathname} ${r.status()}`);
      });
      page.on("request", (r) => {
        const u = new URL(r.url());
        if (u.origin !== origin) problems.push(`request to another origin: ${r.url()}`);
        else if (u.pathname.startsWith("/v1/") && !badKeyPhase && r.headers().authorization !== `Bearer ${key}`) problems.push(`no key on ${r.method()} ${u.pathname}`);
      });

      // Sign-in: a wrong key is refused, readably.
      await page.goto(`${f.server.url}/`);
      assert.equal(new URL(page.url()).pathname, "/dashboard/");
      await page.getByLabel("API key").fill("den_not_a_key_000000000");
      await page.getByRole("button", { name: "Sign in" }).click();
      const refused = page.getByRole("alert");
      await refused.waitFor();
      assert.match(await refused.innerText(), /refused[\s\S]*unauthorized[\s\S]*401/);
      badKeyPhase = false;
      await page.getByLabel("API key").fill(key);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByRole("heading", { name: "Sandboxes", level: 1 }).waitFor();
      assert.equal(await page.evaluate("sessionStorage.getItem('den.apiKey')"), key);
      await page.getByText("No sandboxes yet.").waitFor();

      // A sandbox made through the API shows up by itself (the table is live).
      const run = Math.random().toString(36).slice(2, 8);
      const made = await api("POST", "/v1/sandboxes", { template: "base", ttl_seconds: 1800, metadata: { suite: "dashboard", run } });
      assert.equal(made.status, 201, made.text);
      const id = made.body.id as string;
      const table = page.getByRole("table", { name: "Sandboxes" });
      const row = table.getByRole("row").filter({ hasText: id });
      // (a poll may land while the create is still under way: the row shows `creating` until the next one)
      await row.filter({ hasText: "running" }).waitFor({ timeout: 20_000 });
      // Sandbox, State, Template, Age, TTL, Idle, Persistent, Metadata
      const cells = (await row.getByRole("cell").allTextContents()).map((c) => c.trim());
      assert.equal(cells.length, 8, cells.join(" | "));
      assert.equal(cells[0], id);
      assert.equal(cells[1], "running");
      assert.equal(cells[2], `base@${made.body.template_version.slice(0, 6)}`);
      assert.match(cells[3]!, /^\d+s$/);
      assert.match(cells[4]!, /^(29|30)m \d\ds$/, "TTL counts down from expires_at");
      assert.match(cells[5]!, /^\d+s$/);
      assert.equal(cells[6], "no");
      assert.equal(cells[7], `suite=dashboardrun=${run}`);

      // Filters: metadata key=value and state, both answered by the API.
      const metadata = page.getByLabel("Metadata", { exact: true });
      await metadata.fill(`run=${run}`);
      await metadata.press("Enter");
      await page.waitForFunction("location.hash.includes('metadata=')");
      await row.waitFor();
      await metadata.fill("run=no-such-run");
      await metadata.press("Enter");
      await page.getByText("No sandboxes match these filters.").waitFor();
      assert.equal(await table.getByRole("row").filter({ hasText: id }).count(), 0);
      await page.getByRole("button", { name: "Clear filters" }).first().click();
      await row.waitFor();
      await page.getByLabel("State", { exact: true }).selectOption("hibernated");
      await page.getByText("No sandboxes match these filters.").waitFor();
      await page.getByLabel("State", { exact: true }).selectOption("running");
      await row.waitFor();

      // A server in the sandbox, for the ports section.
      const proc = await api("POST", `/v1/sandboxes/${id}/processes`, { cmd: "mkdir -p /srv && echo dashboard-port-ok > /srv/hello.txt && cd /srv && exec python3 -m http.server 8000" });
      assert.equal(proc.status, 201, proc.text);
      await waitFor("port 8000 listening", async () => ((await api("GET", `/v1/sandboxes/${id}/ports`)).body?.ports?.some((p: { port: number }) => p.port === 8000) ? true : undefined), 60_000, 500);

      // The detail page.
      await table.getByRole("link", { name: id }).click();
      await page.getByRole("heading", { name: id, level: 1 }).waitFor();
      const state = page.getByRole("status", { name: "Sandbox state" });
      await state.filter({ hasText: /^running$/ }).waitFor();
      assert.equal(await state.innerText(), "running");

      // Ports: a signed URL made from the page works without a key.
      await page.getByRole("button", { name: "Create signed URL for port 8000" }).click();
      const link = page.getByRole("link", { name: "Signed URL for port 8000" });
      await link.waitFor();
      const href = (await link.getAttribute("href"))!;
      // It is the port's own origin, not the dashboard's (a guest's page never runs on Den's origin).
      const file = new URL(href);
      assert.equal(file.hostname, `8000-${id.replace("_", "-")}.localhost`);
      assert.ok(file.searchParams.get("den_token"));
      file.pathname = "/hello.txt";
      const tab = await browser.newPage();
      const viaUrl = await tab.goto(file.toString());
      assert.equal(viaUrl?.status(), 200);
      assert.equal(await viaUrl?.text(), "dashboard-port-ok\n");
      await tab.close();

      // Fork from the page: the child appears in the fork tree.
      await page.getByRole("toolbar", { name: "Sandbox actions" }).getByRole("button", { name: "Fork" }).click();
      const forkDialog = page.getByRole("dialog", { name: "Fork sandbox" });
      await forkDialog.waitFor();
      assert.equal(await forkDialog.getByLabel("Number of forks").inputValue(), "1");
      await forkDialog.getByRole("button", { name: "Fork", exact: true }).click();
      await forkDialog.waitFor({ state: "detached" });
      const child = await waitFor("the fork", async () => (await api("GET", `/v1/sandboxes?metadata.forked_from=${id}`)).body?.sandboxes?.[0]?.id as string | undefined, 120_000, 500);
      await page.getByRole("list", { name: "Forks" }).getByRole("link", { name: child }).waitFor();

      // Hibernate (warm) from the page.
      await page.getByRole("button", { name: "Hibernate warm" }).click();
      await state.filter({ hasText: /^hibernated · warm$/ }).waitFor({ timeout: 120_000 }).catch(async (e: Error) => {
        const toasts = await page.locator("#toasts").innerText().catch(() => "?");
        const now = await api("GET", `/v1/sandboxes/${id}`);
        const events = await api("GET", `/v1/sandboxes/${id}/events?limit=10`);
        throw new Error(`${e.message}\nstate shown: ${await state.innerText().catch(() => "?")}; API: ${now.text}\nactions: ${responses.join("; ")}\ntoasts: ${toasts}\nproblems: ${problems.join("; ")}\nevents: ${events.text}`);
      });
      const after = await api("GET", `/v1/sandboxes/${id}`);
      assert.equal(after.body.state, "hibernated");
      assert.equal(after.body.hibernate_mode, "warm");
      assert.equal(await page.getByRole("button", { name: "Wake" }).isEnabled(), true);
      assert.equal(await page.getByRole("button", { name: "Hibernate warm" }).isEnabled(), false);

      // The timeline shows it (with its reason and data), and the fork and the creation before it.
      const timeline = page.getByRole("list", { name: "Lifecycle timeline" });
      const hibernated = timeline.getByRole("listitem").filter({ hasText: "mode=warm" });
      await hibernated.waitFor();
      assert.match(await hibernated.innerText(), /^hibernated\s+user\b/);
      assert.match(await timeline.getByRole("listitem").filter({ hasText: "children=" }).innerText(), new RegExp(`^forked[\\s\\S]*${child}`));
      await timeline.getByRole("listitem").filter({ hasText: "template=base" }).waitFor();
      const types = await timeline.locator(".event-type").allInnerTexts();
      assert.ok(types.indexOf("hibernated") < types.indexOf("forked") && types.indexOf("forked") < types.indexOf("creating"), `newest first: ${types.join(", ")}`);

      // Usage: a chart of time by state, with running time in it.
      const chart = page.getByRole("img", { name: /^Time by state/ });
      await chart.waitFor();
      assert.match((await chart.getAttribute("aria-label"))!, /Running (\d\.\d|[1-5]\d|\d+m \d\d)s/);

      await page.getByRole("heading", { name: "Checkpoints" }).waitFor();
      await page.evaluate("document.getElementById('toasts').replaceChildren()"); // notices would cover the picture
      const artifacts = process.env.DEN_ARTIFACTS_DIR ?? tmpdir();
      mkdirSync(artifacts, { recursive: true });
      const shot = join(artifacts, "den-dashboard.png");
      await page.screenshot({ path: shot, fullPage: true });
      console.log(`dashboard screenshot: ${shot}`);

      // Destroy asks first; Cancel keeps the sandbox.
      const destroyButton = page.getByRole("toolbar", { name: "Sandbox actions" }).getByRole("button", { name: "Destroy" });
      await destroyButton.click();
      const confirm = page.getByRole("dialog", { name: "Destroy sandbox" });
      await confirm.waitFor();
      assert.match(await confirm.innerText(), new RegExp(`Destroy ${id}\\?[\\s\\S]*cannot be undone`));
      await confirm.getByRole("button", { name: "Cancel" }).click();
      await confirm.waitFor({ state: "detached" });
      await new Promise((r) => setTimeout(r, 500));
      assert.equal((await api("GET", `/v1/sandboxes/${id}`)).body.state, "hibernated");
      await destroyButton.click();
      await confirm.waitFor();
      await confirm.getByRole("button", { name: "Destroy", exact: true }).click();
      await state.filter({ hasText: /^destroyed$/ }).waitFor();
      assert.equal((await api("GET", `/v1/sandboxes/${id}`)).body.state, "destroyed");
      assert.equal(await destroyButton.isEnabled(), false);

      // Back in the list: gone (the list leaves destroyed sandboxes out), the fork still there.
      await page.getByRole("navigation", { name: "Breadcrumb" }).getByRole("link", { name: "Sandboxes" }).click();
      await table.getByRole("row").filter({ hasText: child }).waitFor();
      assert.equal(await table.getByRole("link", { name: id, exact: true }).count(), 0);
      const listShot = join(artifacts, "den-dashboard-list.png");
      await page.screenshot({ path: listShot });
      console.log(`dashboard list screenshot: ${listShot}`);

      // Sign out forgets the key.
      await page.getByRole("button", { name: "Sign out" }).click();
      await page.getByLabel("API key").waitFor();
      assert.equal(await page.evaluate("sessionStorage.getItem('den.apiKey')"), null);
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
      for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
    }
  });

  test("in Chromium: webhooks: add one (its secret shown once), list, its deliveries, delete (confirmed)", {
    skip: existsSync(CHROMIUM) ? false : `${CHROMIUM} is missing (Debian's chromium package; scripts/install-deps.sh installs it)`,
    timeout: 180_000,
  }, async () => {
    const { chromium } = await import("playwright-core");
    // An owner without sandboxes: nothing happens that would be delivered (no VM in this test).
    const created = await f.api("POST", "/v1/keys", { owner: "dashboard-webhooks" });
    assert.equal(created.status, 201, created.text);
    const key = created.body.key as string;
    const api = client(f.server.url, key);
    const url = "http://198.51.100.7:9/hook"; // TEST-NET-2: public, and never contacted here
    const problems: string[] = [];
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      page.setDefaultTimeout(30_000);
      page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
      page.on("console", (m) => {
        if (m.type() === "error" && !adminProbeRefused(m)) problems.push(`console: ${m.text()}`);
      });
      await page.goto(`${f.server.url}/dashboard/`);
      await page.getByLabel("API key").fill(key);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByRole("heading", { name: "Sandboxes", level: 1 }).waitFor();
      await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Webhooks" }).click();
      await page.getByRole("heading", { name: "Webhooks", level: 1 }).waitFor();
      assert.equal(await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Webhooks" }).getAttribute("aria-current"), "page");
      await page.getByText("No webhooks yet.").waitFor();

      // Add one for two event types.
      const form = page.getByRole("form", { name: "Add a webhook" });
      await form.getByLabel("URL", { exact: true }).fill(url);
      await form.getByLabel("Description", { exact: true }).fill("from the dashboard");
      await form.getByRole("button", { name: "None", exact: true }).click();
      await form.getByRole("button", { name: "Add webhook" }).click();
      await form.getByText("Pick at least one event.").waitFor();
      await form.getByLabel("sandbox.created", { exact: true }).check();
      await form.getByLabel("sandbox.destroyed", { exact: true }).check();
      await form.getByRole("button", { name: "Add webhook" }).click();
      const secretBox = page.getByRole("region", { name: "Signing secret" });
      await secretBox.waitFor();
      const secret = (await secretBox.locator("code.secret").innerText()).trim();
      assert.match(secret, /^whsec_\S{20,}$/);
      assert.match(await secretBox.innerText(), /not shown again/);

      const listed = (await api("GET", "/v1/webhooks")).body.webhooks as { id: string; url: string; events: string[]; description: string | null }[];
      assert.equal(listed.length, 1, JSON.stringify(listed));
      const hook = listed[0]!;
      assert.equal(hook.url, url);
      assert.deepEqual([...hook.events].sort(), ["sandbox.created", "sandbox.destroyed"]);
      assert.equal(hook.description, "from the dashboard");
      assert.equal("secret" in hook, false);

      // The table shows it; its deliveries (none yet) keep the secret on screen.
      const table = page.getByRole("table", { name: "Webhooks" });
      const row = table.getByRole("row").filter({ hasText: hook.id });
      await row.waitFor();
      const text = await row.innerText();
      for (const part of [url, "from the dashboard", "sandbox.created", "sandbox.destroyed"]) assert.ok(text.includes(part), `${part} in ${text}`);
      assert.doesNotMatch(text, /whsec_/);
      await row.getByRole("button", { name: `Deliveries of ${hook.id}` }).click();
      await page.waitForFunction(`location.hash === "#/webhooks/${hook.id}"`);
      await page.getByText("No deliveries yet").waitFor();
      assert.equal(await secretBox.count(), 1, "looking at deliveries does not lose the secret");
      await page.getByLabel("Status", { exact: true }).selectOption("failed");
      await page.getByText("No failed deliveries.").waitFor();

      // A reload comes back to the same deliveries; the secret is gone for good.
      await page.reload();
      await page.getByText("No deliveries yet").waitFor();
      assert.equal(await page.getByRole("region", { name: "Signing secret" }).count(), 0);
      assert.doesNotMatch(await page.locator("#main").innerText(), /whsec_/);

      // Delete asks first; Cancel keeps it.
      await row.getByRole("button", { name: `Delete ${hook.id}` }).click();
      const confirm = page.getByRole("dialog", { name: "Delete webhook" });
      await confirm.waitFor();
      assert.match(await confirm.innerText(), new RegExp(`Delete ${hook.id}\\?[\\s\\S]*cannot be undone`));
      await confirm.getByRole("button", { name: "Cancel" }).click();
      await confirm.waitFor({ state: "detached" });
      assert.equal((await api("GET", "/v1/webhooks")).body.webhooks.length, 1);
      await row.getByRole("button", { name: `Delete ${hook.id}` }).click();
      await confirm.getByRole("button", { name: "Delete", exact: true }).click();
      await page.getByText("No webhooks yet.").waitFor();
      assert.deepEqual((await api("GET", "/v1/webhooks")).body.webhooks, []);
      assert.equal(await page.evaluate("location.hash"), "#/webhooks");
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
      for (const w of (await api("GET", "/v1/webhooks")).body?.webhooks ?? []) await api("DELETE", `/v1/webhooks/${w.id}`);
    }
  });
  test("in Chromium: templates: grouped with their versions and sources, a build with its log, a running build followed live and cancelled", {
    skip: existsSync(CHROMIUM) ? false : `${CHROMIUM} is missing (Debian's chromium package; scripts/install-deps.sh installs it)`,
    timeout: 600_000,
  }, async () => {
    const { chromium } = await import("playwright-core");
    const owner = "dashboard-templates";
    const created = await f.api("POST", "/v1/keys", { owner });
    assert.equal(created.status, 201, created.text);
    const key = created.body.key as string;
    const api = client(f.server.url, key);
    const cleanUp = async () => {
      for (const b of (await api("GET", "/v1/templates/builds")).body?.builds ?? []) if (b.state === "building" || b.state === "waiting") await api("POST", `/v1/templates/builds/${b.id}/cancel`, {});
      for (const t of (await api("GET", "/v1/templates")).body?.templates ?? []) if (t.owner === owner) await api("DELETE", `/v1/templates/${t.name}`);
    };
    await cleanUp(); // what a run before left in the data dir's database
    // Names of this run's own: a version of the same recipe built before would be reused, with no setup run (and no setup line in its log).
    const run = Math.random().toString(36).slice(2, 8);
    const name = `dash-${run}`;
    const slowName = `slow-${run}`;
    // The second command's text is markup: the page shows it as text.
    const built = await api("POST", "/v1/templates", { name, setup: ["echo hello-from-setup", "true '<img src=x id=injected-by-log>'"] });
    assert.equal(built.status, 201, built.text);
    const buildId = built.headers["den-build-id"]!;
    assert.ok(buildId);
    const version = built.body.version as string;
    const source = built.body.source as string;
    assert.match(source, /^template base@/);
    const problems: string[] = [];
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
    let slowId: string | undefined;
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      page.setDefaultTimeout(60_000);
      page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
      page.on("console", (m) => {
        if (m.type() === "error" && !adminProbeRefused(m)) problems.push(`console: ${m.text()}`);
      });
      page.on("dialog", (d) => {
        problems.push(`a dialog opened: ${d.message()}`);
        void d.dismiss();
      });
      await page.goto(`${f.server.url}/dashboard/`);
      await page.getByLabel("API key").fill(key);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByRole("heading", { name: "Sandboxes", level: 1 }).waitFor();
      const nav = page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Templates" });
      await nav.click();
      await page.getByRole("heading", { name: "Templates", level: 1 }).waitFor();
      assert.equal(await nav.getAttribute("aria-current"), "page");

      // The template, grouped with its versions: the built one current, with its source; base (the host's own) too.
      const table = page.getByRole("table", { name: "Templates" });
      const group = table.locator(`tbody[data-name="${name}"]`);
      await group.waitFor();
      const groupText = await group.innerText();
      for (const part of [name, `owner ${owner}`, "1 version", version, "current", source, "1 vCPU"]) assert.ok(groupText.includes(part), `${part} in ${groupText}`);
      const base = table.locator('tbody[data-name="base"]');
      await base.waitFor();
      assert.match(await base.innerText(), /host's own[\s\S]*current[\s\S]*recipe base/);

      // Its builds: the one made through the API, ready, with the version it made.
      await group.getByRole("button", { name: `Builds of ${name}` }).click();
      await page.waitForFunction(`location.hash === "#/templates/${name}"`);
      const builds = page.getByRole("table", { name: "Builds" });
      const buildRow = builds.getByRole("row").filter({ hasText: buildId });
      await buildRow.filter({ hasText: "ready" }).waitFor();
      const cells = (await buildRow.getByRole("cell").allTextContents()).map((c) => c.trim());
      // Build, State, Source, Version, Started, Took, actions
      assert.equal(cells.length, 7, cells.join(" | "));
      assert.equal(cells[0], `${name}${buildId}`);
      assert.equal(cells[1], "ready");
      assert.match(cells[2]!, /^template\s*from=base\s*setup=2$/);
      assert.equal(cells[3], version);
      assert.match(cells[5]!, /^\d+(s|m \d\ds)$/);
      assert.equal(await buildRow.getByRole("button", { name: `Cancel build ${buildId}` }).count(), 0, "an ended build has no Cancel");

      // Its log, as kept: the setup lines, the markup one as text.
      await buildRow.getByRole("button", { name: `Log of build ${buildId}` }).click();
      await page.waitForFunction(`location.hash === "#/templates/${name}?build=${buildId}"`);
      const log = page.getByRole("list", { name: `Log of build ${buildId}` });
      await log.getByRole("listitem").filter({ hasText: "setup: echo hello-from-setup" }).waitFor();
      await log.getByRole("listitem").filter({ hasText: "setup: true '<img src=x id=injected-by-log>'" }).waitFor();
      assert.equal(await page.locator("#injected-by-log").count(), 0, "log lines are text, not markup");
      assert.match(await log.innerText(), new RegExp(`template ${name}@${version}`));
      assert.match(await page.getByRole("status", { name: "Log status" }).innerText(), /^\d+ lines$/);

      // A build in the background: shown building, its log followed live, then cancelled from the page.
      // (A Dockerfile's RUN step: a cancel stops it at once. A setup command is not stopped by one yet:
      // the host agent checks the cancel only between setup commands, so `setup: ["sleep 120"]` ends ready.)
      const slow = await api("POST", "/v1/templates", { name: slowName, dockerfile: "FROM base\nRUN echo slow-step-started; sleep 120\n", wait: false });
      assert.equal(slow.status, 202, slow.text);
      slowId = slow.body.build.id as string;
      await page.getByRole("button", { name: "All builds" }).click();
      await page.waitForFunction(`location.hash === "#/templates"`);
      const slowRow = builds.getByRole("row").filter({ hasText: slowId });
      await slowRow.filter({ hasText: "building" }).waitFor();
      assert.match(await slowRow.innerText(), new RegExp(`${slowName}[\\s\\S]*dockerfile\\s*from=base\\s*steps=1`));
      await builds.getByRole("row").filter({ hasText: buildId }).waitFor(); // every build of the caller's
      await slowRow.getByRole("button", { name: `Log of build ${slowId}` }).click();
      const slowLog = page.getByRole("list", { name: `Log of build ${slowId}` });
      await slowLog.locator(".log-message").filter({ hasText: /^step 1\/1 \| slow-step-started$/ }).waitFor(); // the step's own output, as it runs
      assert.equal(await page.getByRole("status", { name: "Log status" }).innerText(), "Following live");
      assert.match(await page.locator("#main").innerText(), /1 building/);

      await page.evaluate("document.getElementById('toasts').replaceChildren(); window.scrollTo(0, 0)");
      const artifacts = process.env.DEN_ARTIFACTS_DIR ?? tmpdir();
      mkdirSync(artifacts, { recursive: true });
      const shot = join(artifacts, "den-dashboard-templates.png");
      await page.screenshot({ path: shot, fullPage: true });
      console.log(`dashboard templates screenshot: ${shot}`);

      // Cancel asks first; "Keep building" keeps it.
      const cancel = slowRow.getByRole("button", { name: `Cancel build ${slowId}` });
      await cancel.click();
      const confirm = page.getByRole("dialog", { name: "Cancel build" });
      await confirm.waitFor();
      assert.match(await confirm.innerText(), new RegExp(`Cancel build ${slowId} of ${slowName}\\?`));
      await confirm.getByRole("button", { name: "Keep building" }).click();
      await confirm.waitFor({ state: "detached" });
      assert.equal((await api("GET", `/v1/templates/builds/${slowId}`)).body.state, "building");
      const cancelStarted = Date.now();
      await cancel.click();
      await confirm.getByRole("button", { name: "Cancel build", exact: true }).click();
      await slowRow.filter({ hasText: "cancelled" }).waitFor({ timeout: 150_000 }).catch(async (e: Error) => {
        throw new Error(`${e.message}\nrow: ${await slowRow.innerText().catch(() => "?")}\nAPI: ${(await api("GET", `/v1/templates/builds/${slowId}`)).text}\nproblems: ${problems.join("; ")}`);
      });
      console.log(`the cancelled build ended in ${Date.now() - cancelStarted} ms`);
      const ended = (await api("GET", `/v1/templates/builds/${slowId}`)).body;
      assert.equal(ended.state, "cancelled", JSON.stringify(ended));
      assert.match(await slowRow.innerText(), /cancelled[\s\S]*aborted/);
      assert.equal(await slowRow.getByRole("button", { name: `Cancel build ${slowId}` }).count(), 0);
      // The followed log ended with it.
      await page.getByRole("status", { name: "Log status" }).filter({ hasText: /^\d+ lines?$/ }).waitFor();
      assert.equal(await table.locator(`tbody[data-name="${slowName}"]`).count(), 0, "a cancelled build makes no template");
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
      await cleanUp();
    }
  });
});
