// Templates: every template the key can use (GET /v1/templates), grouped by name with their
// versions, each with its source and how its sandboxes run; the caller's builds (GET
// /v1/templates/builds, all or one template's), a running one cancellable; and one build's
// log (build-log.js). Refreshed every 2 s like the other views. The template whose builds are
// shown and the build whose log is open are kept in the address (#/templates/<name>?build=<id>)
// without a new history entry.
import { h, fill, setText } from "../dom.js";
import * as api from "../api.js";
import { poll, tick } from "../poll.js";
import { card } from "../components/card.js";
import { buildBadge, chip } from "../components/badge.js";
import { confirmDialog } from "../components/dialog.js";
import { errorBox } from "../components/errors.js";
import { toast } from "../components/toast.js";
import { dateTime, duration, mib, plural, shortDateTime } from "../format.js";
import { buildLogSection, RUNNING } from "./build-log.js";

/** The template's versions: the current one first, then newest first. */
function byName(list) {
  const groups = new Map();
  for (const t of list) {
    if (!groups.has(t.name)) groups.set(t.name, []);
    groups.get(t.name).push(t);
  }
  for (const versions of groups.values()) versions.sort((a, b) => Number(b.current) - Number(a.current) || b.created_at.localeCompare(a.created_at));
  return [...groups.entries()].sort(([a], [b]) => a.localeCompare(b));
}

/** How a version's sandboxes run (an image's ENV, WORKDIR, USER, start and ready commands); null: as its source does. */
function runDetails(run) {
  if (!run) return null;
  const item = (label, value) => h("span", { class: "run-item" }, h("span", { class: "muted" }, `${label} `), h("code", {}, value));
  const env = Object.entries(run.env ?? {});
  const items = [
    run.user ? item("user", run.user) : null,
    run.workdir ? item("workdir", run.workdir) : null,
    run.start_cmd ? item("start", run.start_cmd) : null,
    run.ready_cmd ? item("ready", run.ready_cmd) : null,
    env.length ? h("span", { class: "run-item" }, h("span", { class: "muted" }, "env "),
      h("span", { class: "chips" }, env.map(([k, v]) => h("span", { class: "chip", title: `${k}=${v}` }, h("span", { class: "chip-key" }, k), "=", v)))) : null,
  ].filter(Boolean);
  return items.length ? h("div", { class: "run small" }, items) : null;
}

/** A build's source: `{kind, ...}` as the kind and its fields. */
function buildSource(source) {
  const { kind, ...rest } = source ?? {};
  const fields = Object.entries(rest).filter(([, v]) => v !== "");
  return h("div", { class: "build-source" },
    kind ? chip(kind, { title: "source kind" }) : null,
    fields.map(([k, v]) => h("span", { class: "mono small" }, h("span", { class: "muted" }, `${k}=`), v)));
}

export function mountTemplates(root, { name, query }) {
  document.title = "Templates · Den";
  let templates = [];
  let builds = [];
  let loaded = false;
  let buildsLoaded = false;
  let selected = name ?? null; // the template whose builds are shown (null: all of the caller's)
  let logId = query.get("build") || null; // the build whose log is open
  let logPicked = Boolean(logId); // picked by the user (else the newest build's is shown)
  const cancelling = new Set();
  let listKey = "";
  let buildsKey = "";
  const runningCells = new Map(); // build id -> its "took" cell, ticking while it runs

  const summary = h("p", { class: "muted page-subtitle", "aria-live": "polite" }, "Loading…");
  const errorSlot = h("div", { class: "error-slot" });
  const showError = (e, what) => fill(errorSlot, errorBox(e, what, () => fill(errorSlot)));

  const address = () => {
    const path = selected ? `#/templates/${encodeURIComponent(selected)}` : "#/templates";
    return logPicked && logId ? `${path}?build=${encodeURIComponent(logId)}` : path;
  };

  // ---- the templates ----
  const listCard = card("Your templates", { description: "The host's own and those built with this owner's keys; sandboxes start from a template's current version" });

  function renderList() {
    const k = JSON.stringify([templates, selected]);
    if (k === listKey) return;
    listKey = k;
    if (!loaded) return;
    const groups = byName(templates);
    if (!groups.length) {
      return fill(listCard.body, h("p", { class: "muted" }, "No templates. Build one with ", h("code", {}, "den template create"), " or ", h("code", {}, "POST /v1/templates"), "."));
    }
    fill(listCard.body, h("div", { class: "table-scroll" }, h("table", { class: "table table-compact templates-table", "aria-label": "Templates" },
      h("thead", {}, h("tr", {}, ["Template · version", "Source", "Resources", "Created", ""].map((t) => h("th", { scope: "col" }, t)))),
      groups.map(([n, versions]) => {
        const owner = versions[0].owner;
        const show = h("button", { type: "button", class: "button button-sm", "aria-pressed": String(n === selected), "aria-label": `Builds of ${n}` }, "Builds");
        show.addEventListener("click", () => select(n === selected ? null : n));
        return h("tbody", { class: `template-group${n === selected ? " row-selected" : ""}`, dataset: { name: n } },
          h("tr", { class: "group-row" },
            h("th", { scope: "rowgroup", colspan: 4 },
              h("span", { class: "template-name" }, n), " ",
              owner === null ? chip("host's own", { title: "One of this host's own templates: every key can use it" }) : chip(`owner ${owner}`, { title: "Built through the API: only its owner's keys can use it" }), " ",
              h("span", { class: "muted small" }, plural(versions.length, "version"))),
            h("td", { class: "cell-actions" }, show)),
          versions.map((t) => h("tr", { class: "version-row", dataset: { version: t.version } },
            h("td", { class: "cell-version" },
              h("span", { class: "mono", title: `${t.name}@${t.version}` }, t.version), " ",
              t.current ? h("span", { class: "badge badge-sm state-running", title: "New sandboxes of this template start from it" }, "current") : null),
            h("td", { class: "cell-source" },
              t.source ? h("div", { class: "mono source" }, t.source) : h("span", { class: "muted" }, "—"),
              runDetails(t.run)),
            h("td", { class: "num" }, `${t.vcpus} vCPU · ${mib(t.memory_mb)} · ${mib(t.disk_mb)} disk`),
            h("td", { class: "num", title: dateTime(t.created_at) }, shortDateTime(t.created_at)),
            h("td", {}))));
      }))));
  }

  function select(next) {
    selected = next;
    logPicked = false;
    logId = null;
    buildsKey = "";
    buildsLoaded = false;
    history.replaceState(null, "", address());
    renderList();
    renderBuilds();
    void poller.now();
  }

  // ---- the builds ----
  const buildsCard = card("Builds", { description: "Yours, newest first" });
  const buildsFor = buildsCard.el.querySelector(".card-description");
  const allButton = h("button", { type: "button", class: "button button-sm button-ghost", onclick: () => select(null) }, "All builds");
  buildsCard.aside.append(allButton);

  function took(b, now = Date.now()) {
    const end = b.finished_at ? Date.parse(b.finished_at) : now;
    return duration(end - Date.parse(b.created_at));
  }

  async function onCancel(b) {
    const go = await confirmDialog({
      title: "Cancel build",
      message: h("div", {}, h("p", {}, "Cancel build ", h("code", {}, b.id), " of ", h("code", {}, b.name), "?"),
        h("p", { class: "muted" }, "Its build microVM is stopped and nothing it made is kept; the template stays as it was.")),
      confirmLabel: "Cancel build",
      cancelLabel: "Keep building",
      danger: true,
    });
    if (go === null) return;
    cancelling.add(b.id);
    buildsKey = "";
    renderBuilds();
    try {
      await api.cancelBuild(b.id);
      toast(`Cancelling build ${b.id}`);
    } catch (e) {
      cancelling.delete(b.id);
      showError(e, `Could not cancel build ${b.id}`);
      buildsKey = "";
      renderBuilds();
    }
    await poller.now();
  }

  function buildRow(b) {
    const log = h("button", { type: "button", class: "button button-sm", "aria-pressed": String(b.id === logId), "aria-label": `Log of build ${b.id}` }, "Log");
    log.addEventListener("click", () => openLog(b.id));
    let cancel = null;
    if (RUNNING.has(b.state)) {
      const busy = cancelling.has(b.id);
      cancel = h("button", { type: "button", class: "button button-sm button-danger-outline", "aria-label": `Cancel build ${b.id}`, disabled: busy, "aria-busy": busy ? "true" : undefined }, busy ? "Cancelling…" : "Cancel");
      cancel.addEventListener("click", () => onCancel(b));
    }
    const tookCell = h("td", { class: "num", title: b.finished_at ? `Finished ${dateTime(b.finished_at)}` : "Still running" }, took(b));
    if (!b.finished_at) runningCells.set(b.id, { cell: tookCell, b });
    return h("tr", { dataset: { id: b.id }, class: b.id === logId ? "row-selected" : undefined },
      h("td", {}, h("div", { class: "template-name" }, b.name), h("div", { class: "mono small muted" }, b.id)),
      h("td", { class: "cell-state" },
        buildBadge(b.state),
        b.error ? h("div", { class: "build-error small" }, h("code", { class: "error-code" }, b.error.code), " ", b.error.message) : null,
        b.error?.details ? h("details", { class: "build-error-details" }, h("summary", { class: "small" }, "Details"), h("pre", { class: "error-details" }, JSON.stringify(b.error.details, null, 2))) : null),
      h("td", { class: "cell-source" }, buildSource(b.source)),
      h("td", {}, b.version ? h("span", { class: "mono" }, b.version) : h("span", { class: "muted" }, "—")),
      h("td", { class: "num", title: dateTime(b.created_at) }, shortDateTime(b.created_at)),
      tookCell,
      h("td", { class: "cell-actions cell-nowrap" }, log, cancel ? [" ", cancel] : null));
  }

  function renderBuilds() {
    setText(buildsFor, selected ? `Of ${selected}, newest first` : "Yours, newest first");
    allButton.hidden = !selected;
    const k = JSON.stringify([builds, selected, logId, [...cancelling], buildsLoaded]);
    if (k === buildsKey) return;
    buildsKey = k;
    runningCells.clear();
    if (!buildsLoaded) return fill(buildsCard.body, h("p", { class: "muted" }, "Loading…"));
    if (!builds.length) {
      const own = templates.find((t) => t.name === selected);
      return fill(buildsCard.body, h("p", { class: "muted" }, selected
        ? (own && own.owner === null ? [h("code", {}, selected), " is one of the host's own templates (", h("code", {}, "den template build"), "): it has no builds through the API."] : `No builds of ${selected}.`)
        : ["No builds yet. ", h("code", {}, "POST /v1/templates"), " builds one; with ", h("code", {}, "wait: false"), " it answers at once and the build shows here while it runs."]));
    }
    fill(buildsCard.body, h("div", { class: "table-scroll" }, h("table", { class: "table table-compact", "aria-label": "Builds" },
      h("thead", {}, h("tr", {}, ["Build", "State", "Source", "Version", "Started", "Took", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, builds.map(buildRow)))));
  }

  // ---- one build's log ----
  const logSection = buildLogSection({ onEnded: () => void poller.now() });

  function openLog(id) {
    logId = id;
    logPicked = true;
    history.replaceState(null, "", address());
    renderBuilds();
    void showLog();
    logSection.el.scrollIntoView({ block: "nearest", behavior: "smooth" });
  }

  /** The open build's log; none picked, the newest build's. One not listed (older, another template's) is looked up alone. */
  async function showLog() {
    if (!logPicked) logId = builds[0]?.id ?? null;
    if (!logId) return logSection.show(null);
    const id = logId;
    let b = builds.find((x) => x.id === id);
    if (!b) {
      try {
        b = await api.templateBuild(id);
      } catch (e) {
        if (id === logId) logSection.fail(id, e);
        return;
      }
      if (id !== logId) return;
    }
    logSection.show(b);
    logSection.update(b);
  }

  fill(root, h("div", { class: "page" },
    h("div", { class: "page-header" }, h("div", {}, h("h1", {}, "Templates"), summary)),
    errorSlot,
    listCard.el,
    buildsCard.el,
    logSection.el));
  renderBuilds();

  const poller = poll(async () => {
    const sel = selected;
    let list, bs;
    try {
      [list, bs] = await Promise.all([api.templates(), api.templateBuilds(sel ?? undefined)]);
    } catch (e) {
      showError(e, "Could not load templates");
      errorSlot.firstElementChild.dataset.poll = "1"; // cleared by the next good refresh
      throw e;
    }
    if (sel !== selected) return; // the selection changed meanwhile; the next run has it
    if (errorSlot.querySelector("[data-poll]")) fill(errorSlot);
    templates = list;
    builds = bs;
    loaded = true;
    buildsLoaded = true;
    for (const id of cancelling) if (!builds.some((b) => b.id === id && RUNNING.has(b.state))) cancelling.delete(id);
    const names = new Set(templates.map((t) => t.name));
    const running = builds.filter((b) => RUNNING.has(b.state)).length;
    setText(summary, [plural(names.size, "template"), plural(templates.length, "version"), running ? `${running} building` : null].filter(Boolean).join(" · "));
    renderList();
    renderBuilds();
    await showLog();
  });
  const ticker = tick(() => {
    const now = Date.now();
    for (const { cell, b } of runningCells.values()) setText(cell, took(b, now));
  });

  return {
    unmount() {
      poller.stop();
      ticker.stop();
      logSection.unmount();
    },
  };
}
