// needs: memory host, chromium
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { ADMIN_KEY, adminProbeRefused, memoryFixture } from "./helpers.js";

const CHROMIUM = "/usr/bin/chromium";
const skip = existsSync(CHROMIUM) ? false : `${CHROMIUM} is missing (Debian's chromium package; scripts/install-deps.sh installs it)`;

type Host = { id: string; url: string; state: string; managed: string; status: string; capacity: { memory_mb: number; vcpus: number } | null; used: { memory_mb: number; vcpus: number; sandboxes: number } | null; sandboxes: number };

/**
 * A page signed in with `key`, its errors collected into `problems` (an owner key's refused
 * admin probe aside: it is expected), and the status of the dashboard's first GET /v1/hosts (its admin probe).
 */
async function signedIn(browser: Browser, url: string, key: string, problems: string[], ownerKey = false): Promise<{ page: Page; probe: Promise<number> }> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.setDefaultTimeout(30_000);
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !(ownerKey && adminProbeRefused(m))) problems.push(`console: ${m.text()}`);
  });
  await page.goto(`${url}/dashboard/`);
  const probe = page.waitForResponse((r) => new URL(r.url()).pathname === "/v1/hosts").then((r) => r.status());
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Sandboxes", level: 1 }).waitFor();
  return { page, probe };
}

/** The text of each cell of the host's row. */
async function cellsOf(page: Page, id: string): Promise<string[]> {
  const row = page.getByRole("table", { name: "Hosts" }).locator(`tr[data-id="${id}"]`);
  return (await row.getByRole("cell").allInnerTexts()).map((c) => c.trim());
}

describe("web dashboard: hosts", () => {
  const m = memoryFixture();

  test("in Chromium: an admin sees the in-process host, drains and undrains it; what the API says is shown as text; an owner's key has no Hosts", { skip, timeout: 180_000 }, async () => {
    const { chromium } = await import("playwright-core");
    const listed = (await m.api("GET", "/v1/hosts")).body.hosts as Host[];
    assert.equal(listed.length, 1, JSON.stringify(listed));
    const host = listed[0]!;
    assert.equal(host.managed, "config");
    const owner = await m.api("POST", "/v1/keys", { owner: "dashboard-hosts" });
    assert.equal(owner.status, 201, owner.text);
    const problems: string[] = [];
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
    try {
      const { page, probe } = await signedIn(browser, m.server.url, ADMIN_KEY, problems);
      assert.equal(await probe, 200);
      const nav = page.getByRole("navigation", { name: "Main" });
      await nav.getByRole("link", { name: "Hosts" }).click();
      await page.getByRole("heading", { name: "Hosts", level: 1 }).waitFor();
      assert.equal(await nav.getByRole("link", { name: "Hosts" }).getAttribute("aria-current"), "page");
      const table = page.getByRole("table", { name: "Hosts" });
      await table.locator(`tr[data-id="${host.id}"]`).waitFor();
      assert.equal(await table.locator("tbody tr").count(), 1);
      // Host, Status, State, Managed, Lease, Memory, vCPUs, VMs, Sandboxes, Certificate, actions
      const cells = await cellsOf(page, host.id);
      assert.equal(cells.length, 11, cells.join(" | "));
      assert.match(cells[0]!, new RegExp(`^${host.id}\\n${host.url}`));
      assert.equal(cells[1], "up");
      assert.equal(cells[2], "up");
      assert.equal(cells[3], "config");
      assert.equal(cells[4], "—", "a configured host has no lease");
      assert.equal(cells[5], `${host.used!.memory_mb} / ${host.capacity!.memory_mb} MB`);
      assert.equal(cells[6], `${host.used!.vcpus} / ${host.capacity!.vcpus}`);
      assert.equal(cells[7], String(host.used!.sandboxes));
      assert.equal(cells[8], String(host.sandboxes));
      assert.equal(cells[9], "—", "no certificate expiry from this server");
      assert.equal(cells[10], "Drain");
      assert.match(await page.locator(".page-subtitle").innerText(), /^1 host · 1 up · 0 draining · 0 unreachable$/);

      // Drain asks first; Cancel leaves the host up.
      const row = table.locator(`tr[data-id="${host.id}"]`);
      await row.getByRole("button", { name: `Drain ${host.id}`, exact: true }).click();
      const confirm = page.getByRole("dialog", { name: "Drain host" });
      await confirm.waitFor();
      assert.match(await confirm.innerText(), new RegExp(`Drain ${host.id}\\?`));
      await confirm.getByRole("button", { name: "Cancel" }).click();
      await confirm.waitFor({ state: "detached" });
      assert.equal(((await m.api("GET", "/v1/hosts")).body.hosts as Host[])[0]!.state, "up");
      await row.getByRole("button", { name: `Drain ${host.id}`, exact: true }).click();
      await confirm.getByRole("button", { name: "Drain", exact: true }).click();
      await row.getByRole("button", { name: `Undrain ${host.id}`, exact: true }).waitFor();
      assert.equal((await cellsOf(page, host.id))[2], "draining");
      assert.equal(((await m.api("GET", "/v1/hosts")).body.hosts as Host[])[0]!.state, "draining");
      await page.getByText(`Draining ${host.id}: 0 sandboxes and volumes left on it`).waitFor();

      // Undrain needs no confirmation.
      await row.getByRole("button", { name: `Undrain ${host.id}`, exact: true }).click();
      await row.getByRole("button", { name: `Drain ${host.id}`, exact: true }).waitFor();
      assert.equal((await cellsOf(page, host.id))[2], "up");
      assert.equal(((await m.api("GET", "/v1/hosts")).body.hosts as Host[])[0]!.state, "up");

      // What a fleet would answer (a leased host gone quiet, certificates expiring), with markup in
      // its strings: shown as text, the expiry relative and red under a day.
      const hour = 3600_000;
      await page.route("**/v1/hosts", async (r) => {
        const real = (await (await r.fetch()).json()) as { hosts: Host[] };
        const now = Date.now();
        await r.fulfill({ json: { hosts: [
          { ...real.hosts[0], cert_expires_at: new Date(now + 18 * hour + 30 * 60_000).toISOString() },
          { ...real.hosts[0], id: "host_far", url: "https://far.example:7070", cert_expires_at: new Date(now + 30 * 24 * hour + hour).toISOString() },
          {
            ...real.hosts[0], id: "host_gone", url: "<b id=injected-url>x</b>", status: "unreachable", error: "<img src=x id=injected-error>",
            managed: "lease", state: "draining", lease_until: new Date(now + 90_000).toISOString(), capacity: null, used: null, sandboxes: 3,
            cert_expires_at: new Date(now - 2 * hour - 60_000).toISOString(),
          },
        ] } });
      });
      await table.locator('tr[data-id="host_gone"]').waitFor();
      const near = await cellsOf(page, host.id);
      assert.equal(near[9], "in 18 h");
      assert.match((await table.locator(`tr[data-id="${host.id}"] td`).nth(9).getAttribute("class"))!, /text-danger/);
      const far = await cellsOf(page, "host_far");
      assert.equal(far[9], "in 30 d");
      assert.doesNotMatch((await table.locator('tr[data-id="host_far"] td').nth(9).getAttribute("class"))!, /text-danger/);
      const gone = await cellsOf(page, "host_gone");
      assert.ok(gone[0]!.startsWith("host_gone\n<b id=injected-url>x</b>"), gone[0]);
      assert.equal(gone[1], "unreachable\n<img src=x id=injected-error>");
      assert.equal(gone[2], "draining");
      assert.equal(gone[3], "lease");
      assert.match(gone[4]!, /^1m \d\ds$/, "the lease's time left");
      assert.deepEqual(gone.slice(5, 9), ["—", "—", "—", "3"]);
      assert.equal(gone[9], "2 h ago");
      assert.match((await table.locator('tr[data-id="host_gone"] td').nth(9).getAttribute("class"))!, /text-danger/);
      assert.equal(gone[10], "Undrain");
      assert.equal(await page.locator("#injected-url, #injected-error").count(), 0, "API strings are never parsed as HTML");
      assert.match(await page.locator(".page-subtitle").innerText(), /^3 hosts · 2 up · 1 draining · 1 unreachable$/);
      const artifacts = process.env.DEN_ARTIFACTS_DIR ?? tmpdir();
      mkdirSync(artifacts, { recursive: true });
      const shot = join(artifacts, "den-dashboard-hosts.png");
      await page.screenshot({ path: shot, fullPage: true });
      console.log(`dashboard hosts screenshot: ${shot}`);
      await page.unroute("**/v1/hosts");
      await page.close();

      // An owner's key: no Hosts in the navigation, and the page, if reached, shows the API's refusal.
      const { page: ownerPage, probe: ownerProbe } = await signedIn(browser, m.server.url, owner.body.key as string, problems, true);
      assert.equal(await ownerProbe, 403);
      const ownerNav = ownerPage.getByRole("navigation", { name: "Main" });
      await ownerNav.getByRole("link", { name: "Webhooks" }).waitFor();
      assert.equal(await ownerNav.getByRole("link", { name: "Hosts" }).count(), 0);
      await ownerPage.evaluate("location.hash = '#/hosts'");
      await ownerPage.getByRole("heading", { name: "Hosts", level: 1 }).waitFor();
      const refused = ownerPage.getByRole("alert");
      await refused.waitFor();
      assert.match(await refused.innerText(), /Could not load hosts[\s\S]*forbidden[\s\S]*HTTP 403[\s\S]*admin key/);
      assert.equal(await ownerPage.getByRole("table", { name: "Hosts" }).count(), 0);
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
      for (const h of ((await m.api("GET", "/v1/hosts")).body?.hosts ?? []) as Host[]) if (h.state === "draining") await m.api("POST", `/v1/hosts/${h.id}/undrain`);
    }
  });
});
