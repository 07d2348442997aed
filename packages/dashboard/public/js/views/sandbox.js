// One sandbox: header with its state and actions, an overview, and the sections (timeline,
// usage, fork tree, checkpoints, ports, network), all refreshed every 2 s.
import { h, fill, setText } from "../dom.js";
import { getSandbox } from "../api.js";
import { poll, tick } from "../poll.js";
import { countdown, dateTime, mib, bytes, since } from "../format.js";
import { stateBadge, updateStateBadge, metadataChips, chip } from "../components/badge.js";
import { card, keyValues } from "../components/card.js";
import { errorBox } from "../components/errors.js";
import { actionBar } from "./actions.js";
import { timelineSection } from "./timeline.js";
import { forksSection } from "./forks.js";
import { checkpointsSection } from "./checkpoints.js";
import { portsSection } from "./ports.js";
import { networkSection } from "./network.js";
import { usageSection } from "./usage.js";

function overviewSection() {
  const c = card("Overview");
  const live = {}; // elements whose text ticks every second
  const t = (key) => (live[key] = h("span", { class: "num" }));

  function render(sbx) {
    fill(c.body, keyValues([
      ["State", h("span", {}, sbx.state === "hibernated" ? `hibernated (${sbx.hibernate_mode})` : sbx.state, sbx.state_reason ? [" ", chip(sbx.state_reason, { title: "reason" })] : null)],
      ["Template", h("span", { class: "mono" }, `${sbx.template}@${sbx.template_version}`)],
      ["Created", h("span", {}, dateTime(sbx.created_at), h("span", { class: "muted" }, " · "), t("age"), h("span", { class: "muted" }, " ago"))],
      ["TTL", h("span", {}, t("ttl"), sbx.state === "destroyed" ? null : h("span", { class: "muted" }, sbx.expires_at ? ` · expires ${dateTime(sbx.expires_at)}` : " · no deadline"))],
      ["Idle", h("span", {}, t("idle"), h("span", { class: "muted" }, ` · after ${sbx.idle_timeout_seconds}s idle: ${sbx.persistent ? "nothing (persistent)" : sbx.on_idle}`))],
      ["Persistent", sbx.persistent ? "yes" : "no"],
      ["Resources", `${sbx.vcpus} vCPU · ${mib(sbx.memory_mb)} memory · ${mib(sbx.disk_mb)} disk`],
      sbx.stored_bytes !== null ? ["In the store", `${bytes(sbx.stored_bytes)} (memory ${mib(sbx.memory_mb)})`] : null,
      sbx.destroyed_at ? ["Destroyed", dateTime(sbx.destroyed_at)] : null,
      ["Metadata", metadataChips(sbx.metadata)],
    ]));
    times(sbx);
  }

  function times(sbx) {
    const now = Date.now();
    setText(live.age, since(sbx.created_at, now));
    const ttl = sbx.state === "destroyed" ? { text: "—", left: Infinity } : countdown(sbx.expires_at, now);
    setText(live.ttl, ttl.text);
    live.ttl.className = `num ${ttl.left < 60_000 ? "text-danger" : ttl.left < 300_000 ? "text-warn" : ""}`;
    setText(live.idle, sbx.state === "running" ? `${since(sbx.last_activity_at, now)} since last activity` : `last activity ${since(sbx.last_activity_at, now)} ago`);
  }

  let key = "";
  return {
    el: c.el,
    update(sbx) {
      const k = JSON.stringify(sbx);
      if (k !== key) (key = k), render(sbx);
    },
    times,
  };
}

export function mountSandbox(root, { id }) {
  document.title = `${id} · Den`;
  let sbx = null;
  let round = 0;
  let force = false; // after an action every section refreshes, the slow ones too

  const errorSlot = h("div", { class: "error-slot" });
  const showError = (e, what) => fill(errorSlot, errorBox(e, what, () => fill(errorSlot)));
  const badge = h("span", { class: "badge", role: "status", "aria-label": "Sandbox state" }, h("span", { class: "dot", "aria-hidden": "true" }), h("span", { class: "label" }, "…"));
  const actions = actionBar(id, { onDone: () => ((force = true), poller.now()), onError: showError });
  const overview = overviewSection();
  const sections = {
    timeline: timelineSection(id),
    usage: usageSection(id),
    forks: forksSection(id),
    checkpoints: checkpointsSection(id, { onError: showError }),
    ports: portsSection(id, { onError: showError }),
    network: networkSection(id),
  };

  fill(root, h("div", { class: "page" },
    h("nav", { class: "breadcrumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/" }, "Sandboxes"), h("span", { "aria-hidden": "true" }, " / "), h("span", { class: "mono", "aria-current": "page" }, id)),
    h("div", { class: "page-header detail-header" },
      h("div", { class: "title-row" }, h("h1", { class: "mono" }, id), badge),
      actions.el),
    errorSlot,
    overview.el,
    h("div", { class: "detail-grid" },
      h("div", { class: "detail-col" }, sections.timeline.el),
      h("div", { class: "detail-col" }, sections.usage.el, sections.forks.el, sections.checkpoints.el, sections.ports.el, sections.network.el))));

  const poller = poll(async () => {
    try {
      sbx = await getSandbox(id);
    } catch (e) {
      if (e.status === 404 || e.status === 400) {
        poller.stop();
        fill(root, h("div", { class: "page" }, h("div", { class: "empty" },
          h("h1", { class: "empty-title" }, "Sandbox not found"),
          h("p", { class: "muted" }, h("code", {}, id), " does not exist or belongs to another key."),
          h("a", { href: "#/", class: "button" }, "Back to sandboxes"))));
        return;
      }
      showError(e, "Could not load the sandbox");
      errorSlot.firstElementChild.dataset.poll = "1"; // cleared by the next good refresh
      throw e;
    }
    if (errorSlot.querySelector("[data-poll]")) fill(errorSlot);
    updateStateBadge(badge, sbx);
    actions.update(sbx);
    overview.update(sbx);
    const r = force ? 0 : round++;
    force = false;
    await Promise.all(Object.values(sections).map((s) => s.refresh(sbx, r)));
  });
  const ticker = tick(() => sbx && overview.times(sbx));

  return {
    unmount() {
      poller.stop();
      ticker.stop();
    },
  };
}
