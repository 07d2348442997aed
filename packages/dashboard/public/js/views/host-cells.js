// The cells of a host's row (GET /v1/hosts' HostEntry): badges, use against capacity, and the
// two times that count down (lease, certificate), which `updateTimes` refreshes every second.
import { h, setText } from "../dom.js";
import { countdown, dateTime, relative } from "../format.js";

const STATUS = { up: ["state-running", "It answers (a registered host: and holds its lease)"], unreachable: ["state-error", "It does not answer now"] };
const STATE = {
  up: ["state-running", "Takes new sandboxes"],
  draining: ["state-warm", "Draining: takes no new sandbox; its own are cold-hibernated to wake elsewhere"],
  removed: ["state-destroyed", "Removed"],
};
const MANAGED = { config: "Given by the server's configuration", lease: "Registered itself and renews a lease" };
/** A certificate expiring sooner than this is shown in red. */
const CERT_WARN_MS = 24 * 3600_000;

function badge([cls, hint], label) {
  return h("span", { class: `badge badge-sm ${cls}`, title: hint },
    h("span", { class: "dot", "aria-hidden": "true" }), h("span", { class: "label" }, label));
}

export function hostCell(host) {
  const k = host.kind;
  return h("td", { class: "cell-host" },
    h("div", { class: "mono link-strong" }, host.id),
    h("div", { class: "small muted host-url" }, host.url),
    k ? h("div", { class: "small muted" }, `${k.arch} · ${k.accelerator} · QEMU ${k.qemuVersion}`) : null);
}

export function statusCell(host) {
  return h("td", { class: "cell-status" },
    badge(STATUS[host.status] ?? ["", host.status], host.status),
    host.error ? h("div", { class: "small cell-error host-error" }, host.error) : null,
    host.lost_at ? h("div", { class: "small text-danger", title: dateTime(host.lost_at) }, `sandboxes lost ${relative(host.lost_at)}`) : null);
}

export function stateCell(host) {
  return h("td", {}, badge(STATE[host.state] ?? ["", host.state], host.state));
}

export function managedCell(host) {
  return h("td", { title: MANAGED[host.managed] ?? host.managed }, host.managed);
}

/** "used / capacity" of one resource; "—" while the host does not report (it does not answer). */
function ratio(used, cap, unit = "") {
  if (used === undefined || cap === undefined) return "—";
  return `${used} / ${cap}${unit}`;
}

export function useCells(host) {
  const u = host.used ?? {}, c = host.capacity ?? {};
  return [
    h("td", { class: "num", title: "Memory in use / capacity" }, ratio(u.memory_mb, c.memory_mb, " MB")),
    h("td", { class: "num", title: "vCPUs in use / capacity" }, ratio(u.vcpus, c.vcpus)),
    h("td", { class: "num", title: "VMs on the host (running or warm-hibernated)" }, u.sandboxes ?? "—"),
    h("td", { class: "num", title: "Live sandboxes the database places on it" }, host.sandboxes),
  ];
}

export const leaseCell = () => h("td", { class: "num" });
export const certCell = () => h("td", { class: "num" });

/** The lease's time left and the certificate's expiry, as of `now`. */
export function updateTimes(cells, host, now) {
  if (host.lease_until) {
    const c = countdown(host.lease_until, now);
    setText(cells.lease, c.text);
    cells.lease.className = `num ${c.left <= 0 ? "text-danger" : ""}`;
    cells.lease.title = `Lease until ${dateTime(host.lease_until)}`;
  } else {
    setText(cells.lease, "—");
    cells.lease.title = host.managed === "config" ? "No lease: configured" : "No lease";
  }
  // cert_expires_at: ISO time, or null/absent when the host has no certificate (or the server predates the field).
  const cert = host.cert_expires_at;
  if (cert) {
    setText(cells.cert, relative(cert, now));
    cells.cert.className = `num ${Date.parse(cert) - now < CERT_WARN_MS ? "text-danger" : ""}`;
    cells.cert.title = `Certificate expires ${dateTime(cert)}`;
  } else {
    setText(cells.cert, "—");
    cells.cert.className = "num";
    cells.cert.title = "No certificate known";
  }
}
