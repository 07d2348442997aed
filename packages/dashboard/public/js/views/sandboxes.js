// The sandboxes table: live (polled every 2 s), filtered by state and metadata key=value.
import { h, fill, setText } from "../dom.js";
import { listSandboxes } from "../api.js";
import { poll, tick } from "../poll.js";
import { countdown, since, dateTime, plural } from "../format.js";
import { stateBadge, updateStateBadge, metadataChips } from "../components/badge.js";
import { errorBox } from "../components/errors.js";

const STATES = [
  ["", "All but destroyed"],
  ["running", "Running"],
  ["hibernated", "Hibernated (warm or cold)"],
  ["hibernated:warm", "Hibernated · warm"],
  ["hibernated:cold", "Hibernated · cold"],
  ["creating", "Creating"],
  ["lost", "Lost"],
  ["error", "Error"],
  ["destroyed", "Destroyed"],
];

/** "a=b, c=d" -> { a: "b", c: "d" }; throws on an entry without "=". */
export function parseMetadataFilter(text) {
  const out = {};
  for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const i = part.indexOf("=");
    if (i <= 0) throw new Error(`"${part}" is not key=value`);
    out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

const formatMetadataFilter = (m) => Object.entries(m).map(([k, v]) => `${k}=${v}`).join(", ");

export function mountSandboxes(root, { query }) {
  document.title = "Sandboxes · Den";
  let filter = { state: query.get("state") ?? "", metadata: {} };
  try {
    filter.metadata = parseMetadataFilter(query.get("metadata") ?? "");
  } catch {
    filter.metadata = {};
  }
  let sandboxes = [];
  let loaded = false;
  const rows = new Map();

  // ---- filters ----
  const stateSelect = h("select", { id: "filter-state", name: "state" },
    STATES.map(([v, label]) => h("option", { value: v, selected: v === filter.state }, label)));
  const metaInput = h("input", { id: "filter-metadata", name: "metadata", type: "text", placeholder: "key=value, key2=value2", spellcheck: "false", autocomplete: "off", value: formatMetadataFilter(filter.metadata) });
  const metaError = h("p", { class: "field-error", id: "filter-metadata-error", "aria-live": "polite" });
  metaInput.setAttribute("aria-describedby", metaError.id);
  const clearButton = h("button", { type: "button", class: "button button-ghost", onclick: () => setFilter({ state: "", metadata: {} }) }, "Clear filters");
  const form = h("form", { class: "filters", role: "search", "aria-label": "Filter sandboxes", onsubmit: (e) => (e.preventDefault(), applyForm()) },
    h("div", { class: "field-inline" }, h("label", { for: stateSelect.id }, "State"), stateSelect),
    h("div", { class: "field-inline field-grow" }, h("label", { for: metaInput.id }, "Metadata"), metaInput),
    h("button", { type: "submit", class: "button" }, "Apply"),
    clearButton,
    metaError);
  stateSelect.addEventListener("change", () => applyForm());

  function applyForm() {
    try {
      const metadata = parseMetadataFilter(metaInput.value);
      setText(metaError, "");
      metaInput.removeAttribute("aria-invalid");
      setFilter({ state: stateSelect.value, metadata });
    } catch (e) {
      setText(metaError, e.message);
      metaInput.setAttribute("aria-invalid", "true");
    }
  }

  function setFilter(f) {
    filter = f;
    stateSelect.value = f.state;
    metaInput.value = formatMetadataFilter(f.metadata);
    const q = new URLSearchParams();
    if (f.state) q.set("state", f.state);
    if (Object.keys(f.metadata).length) q.set("metadata", formatMetadataFilter(f.metadata));
    const qs = q.toString();
    // Kept in the address (shareable, survives reload) without a new history entry per change.
    history.replaceState(null, "", `#/${qs ? `?${qs}` : ""}`);
    loaded = false;
    render();
    void poller.now();
  }

  const addMetadataFilter = (k, v) => setFilter({ ...filter, metadata: { ...filter.metadata, [k]: v } });

  // ---- table ----
  const summary = h("p", { class: "muted page-subtitle", "aria-live": "polite" }, "Loading…");
  const errorSlot = h("div", { class: "error-slot" });
  const tbody = h("tbody");
  const table = h("table", { class: "table", "aria-label": "Sandboxes" },
    h("thead", {}, h("tr", {}, ["Sandbox", "State", "Template", "Age", "TTL", "Idle", "Persistent", "Metadata"].map((c) => h("th", { scope: "col" }, c)))),
    tbody);
  const empty = h("div", { class: "empty", hidden: true });

  fill(root, h("div", { class: "page" },
    h("div", { class: "page-header" }, h("div", {}, h("h1", {}, "Sandboxes"), summary)),
    form,
    errorSlot,
    h("div", { class: "card table-card" }, h("div", { class: "table-scroll" }, table), empty)));

  function createRow(sbx) {
    const cells = {
      id: h("td", { class: "cell-id" }, h("a", { href: `#/sandboxes/${sbx.id}`, class: "mono link-strong" }, sbx.id)),
      state: h("td", {}, stateBadge(sbx)),
      template: h("td", {}),
      age: h("td", { class: "num" }),
      ttl: h("td", { class: "num" }),
      idle: h("td", { class: "num" }),
      persistent: h("td", {}),
      metadata: h("td", { class: "cell-metadata" }),
    };
    const tr = h("tr", { class: "row-link", dataset: { id: sbx.id } }, Object.values(cells));
    tr.addEventListener("click", (e) => {
      if (e.target.closest("a, button")) return;
      location.hash = `#/sandboxes/${sbx.id}`;
    });
    return { tr, cells, metaKey: "" };
  }

  function updateRow(row, sbx, now) {
    const c = row.cells;
    updateStateBadge(c.state.firstChild, sbx);
    setText(c.template, `${sbx.template}@${sbx.template_version.slice(0, 6)}`);
    c.template.title = `${sbx.template}@${sbx.template_version}`;
    updateTimes(row, sbx, now);
    setText(c.persistent, sbx.persistent ? "yes" : "no");
    const metaKey = JSON.stringify(sbx.metadata);
    if (row.metaKey !== metaKey) {
      row.metaKey = metaKey;
      fill(c.metadata, metadataChips(sbx.metadata, addMetadataFilter));
    }
  }

  function updateTimes(row, sbx, now) {
    const c = row.cells;
    setText(c.age, since(sbx.created_at, now));
    c.age.title = `Created ${dateTime(sbx.created_at)}`;
    const ttl = sbx.state === "destroyed" ? { text: "—", left: Infinity } : countdown(sbx.expires_at, now);
    setText(c.ttl, ttl.text);
    c.ttl.className = `num ${ttl.left < 60_000 ? "text-danger" : ttl.left < 300_000 ? "text-warn" : ""}`;
    c.ttl.title = sbx.expires_at ? `Expires ${dateTime(sbx.expires_at)}` : "No deadline";
    setText(c.idle, sbx.state === "running" ? since(sbx.last_activity_at, now) : "—");
    c.idle.title = `Last activity ${dateTime(sbx.last_activity_at)}; idle timeout ${sbx.idle_timeout_seconds}s, then ${sbx.persistent ? "nothing (persistent)" : sbx.on_idle}`;
  }

  function render() {
    const now = Date.now();
    let list = sandboxes;
    const [state, mode] = filter.state.split(":");
    if (mode) list = list.filter((s) => s.hibernate_mode === mode);
    list = [...list].sort((a, b) => b.created_at.localeCompare(a.created_at) || a.id.localeCompare(b.id));
    const seen = new Set();
    for (const [i, sbx] of list.entries()) {
      seen.add(sbx.id);
      let row = rows.get(sbx.id);
      if (!row) rows.set(sbx.id, (row = createRow(sbx)));
      row.sbx = sbx;
      updateRow(row, sbx, now);
      if (tbody.children[i] !== row.tr) tbody.insertBefore(row.tr, tbody.children[i] ?? null);
    }
    for (const [id, row] of rows) if (!seen.has(id)) (row.tr.remove(), rows.delete(id));

    const filtered = Boolean(state) || Object.keys(filter.metadata).length > 0;
    clearButton.hidden = !filtered;
    table.hidden = loaded && list.length === 0;
    empty.hidden = !loaded || list.length > 0;
    if (!empty.hidden) {
      fill(empty, filtered
        ? [h("p", { class: "empty-title" }, "No sandboxes match these filters."), h("button", { type: "button", class: "button", onclick: () => setFilter({ state: "", metadata: {} }) }, "Clear filters")]
        : [h("p", { class: "empty-title" }, "No sandboxes yet."), h("p", { class: "muted" }, "Create one with the SDK (", h("code", {}, "Sandbox.create()"), ") or ", h("code", {}, "POST /v1/sandboxes"), ".")]);
    }
    if (!loaded) return setText(summary, "Loading…");
    const count = (st, m) => list.filter((s) => s.state === st && (!m || s.hibernate_mode === m)).length;
    setText(summary, [plural(list.length, "sandbox", "sandboxes"), `${count("running")} running`, `${count("hibernated", "warm")} warm`, `${count("hibernated", "cold")} cold`].join(" · "));
  }

  const poller = poll(async () => {
    const [state] = filter.state.split(":");
    const want = JSON.stringify(filter);
    try {
      const list = await listSandboxes({ state: state || undefined, metadata: filter.metadata });
      if (want !== JSON.stringify(filter)) return; // the filter changed meanwhile; the next run has it
      sandboxes = list;
      loaded = true;
      fill(errorSlot);
      render();
    } catch (e) {
      fill(errorSlot, errorBox(e, "Could not load sandboxes"));
      throw e;
    }
  });
  const ticker = tick(() => {
    const now = Date.now();
    for (const row of rows.values()) updateTimes(row, row.sbx, now);
  });
  render();

  return {
    unmount() {
      poller.stop();
      ticker.stop();
    },
  };
}
