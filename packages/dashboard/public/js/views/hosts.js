// Hosts (admin): the deployment's host agents (GET /v1/hosts), refreshed every 2 s, each with
// its status, state, lease, use and certificate expiry, and Drain (confirmed) / Undrain.
// An owner's key is answered 403: the error is shown and polling stops (it would not change).
import { h, fill, setText } from "../dom.js";
import * as api from "../api.js";
import { poll, tick } from "../poll.js";
import { confirmDialog } from "../components/dialog.js";
import { errorBox } from "../components/errors.js";
import { toast } from "../components/toast.js";
import { plural } from "../format.js";
import { certCell, hostCell, leaseCell, managedCell, stateCell, statusCell, updateTimes, useCells } from "./host-cells.js";

const COLUMNS = ["Host", "Status", "State", "Managed", "Lease", "Memory", "vCPUs", "VMs", "Sandboxes", "Certificate", ""];

export function mountHosts(root) {
  document.title = "Hosts · Den";
  let list = [];
  let loaded = false;
  let key = "";
  const busy = new Set(); // hosts with a drain or undrain under way: their button stays disabled across refreshes
  const rows = new Map(); // id -> { host, cells }

  const summary = h("p", { class: "muted page-subtitle", "aria-live": "polite" }, "Loading…");
  const errorSlot = h("div", { class: "error-slot" });
  const tbody = h("tbody");
  const table = h("table", { class: "table", "aria-label": "Hosts", hidden: true },
    h("thead", {}, h("tr", {}, COLUMNS.map((c) => h("th", { scope: "col" }, c)))),
    tbody);
  const empty = h("div", { class: "empty", hidden: true }, h("p", { class: "empty-title" }, "No hosts."));

  fill(root, h("div", { class: "page" },
    h("div", { class: "page-header" }, h("div", {}, h("h1", {}, "Hosts"), summary)),
    errorSlot,
    h("div", { class: "card table-card" }, h("div", { class: "table-scroll" }, table), empty)));

  function actionButton(host) {
    const draining = host.state === "draining";
    if (host.state !== "up" && !draining) return null;
    const label = draining ? "Undrain" : "Drain";
    const b = h("button", {
      type: "button", class: `button button-sm ${draining ? "" : "button-danger-outline"}`, "aria-label": `${label} ${host.id}`,
      disabled: busy.has(host.id), "aria-busy": busy.has(host.id) ? "true" : undefined,
    }, label);
    b.addEventListener("click", () => (draining ? undrain(host) : drain(host)));
    return b;
  }

  function createRow(host) {
    const cells = { lease: leaseCell(), cert: certCell() };
    const tr = h("tr", { dataset: { id: host.id } },
      hostCell(host), statusCell(host), stateCell(host), managedCell(host), cells.lease, useCells(host), cells.cert,
      h("td", { class: "cell-actions cell-nowrap" }, actionButton(host)));
    return { tr, cells, host };
  }

  function render() {
    const k = JSON.stringify([loaded, list, [...busy]]);
    if (k === key) return;
    key = k;
    if (!loaded) return;
    const now = Date.now();
    rows.clear();
    fill(tbody, list.map((host) => {
      const row = createRow(host);
      rows.set(host.id, row);
      updateTimes(row.cells, host, now);
      return row.tr;
    }));
    table.hidden = list.length === 0;
    empty.hidden = list.length > 0;
    const count = (f) => list.filter(f).length;
    setText(summary, [plural(list.length, "host"), `${count((x) => x.status === "up")} up`, `${count((x) => x.state === "draining")} draining`, `${count((x) => x.status === "unreachable")} unreachable`].join(" · "));
  }

  async function act(host, what, call) {
    busy.add(host.id);
    render();
    try {
      const r = await call(host.id);
      toast(what === "drain" ? `Draining ${host.id}: ${plural(r?.left ?? 0, "sandbox or volume", "sandboxes and volumes")} left on it` : `${host.id} takes new sandboxes again`);
    } catch (e) {
      fill(errorSlot, errorBox(e, `Could not ${what} ${host.id}`, () => fill(errorSlot)));
    } finally {
      busy.delete(host.id);
      await poller.now();
    }
  }

  async function drain(host) {
    const go = await confirmDialog({
      title: "Drain host",
      message: h("div", {},
        h("p", {}, "Drain ", h("code", {}, host.id), "?"),
        h("p", { class: "muted" }, "It takes no new sandbox; its own are cold-hibernated so they wake on another host. Undrain ends it.")),
      confirmLabel: "Drain",
      danger: true,
    });
    if (go !== null) await act(host, "drain", api.drainHost);
  }

  const undrain = (host) => act(host, "undrain", api.undrainHost);

  const poller = poll(async () => {
    try {
      list = await api.hosts();
      loaded = true;
      if (errorSlot.querySelector(".load-error")) fill(errorSlot);
      render();
    } catch (e) {
      fill(errorSlot, h("div", { class: "load-error" }, errorBox(e, "Could not load hosts")));
      setText(summary, "");
      if (e.status === 403) return poller.stop(); // an owner's key: no use asking again
      throw e;
    }
  });
  const ticker = tick(() => {
    const now = Date.now();
    for (const row of rows.values()) updateTimes(row.cells, row.host, now);
  });

  return {
    unmount() {
      poller.stop();
      ticker.stop();
    },
  };
}
