// Time and cost since creation: running vs warm vs cold hibernated, from
// GET /v1/usage?group_by=sandbox&from=<created_at> (this sandbox's group), as a stacked bar.
import { h, s, fill } from "../dom.js";
import { usage } from "../api.js";
import { card, keyValues } from "../components/card.js";
import { inlineError } from "../components/errors.js";
import { money, seconds } from "../format.js";

const PARTS = [
  ["running_seconds", "Running", "seg-running"],
  ["warm_hibernated_seconds", "Warm hibernated", "seg-warm"],
  ["cold_hibernated_seconds", "Cold hibernated", "seg-cold"],
];

const small = (x) => (x === 0 ? "0" : x < 0.0001 ? "< 0.0001" : x.toPrecision(3));
const pct = (x, total) => (total > 0 ? `${Math.round((x / total) * 100)}%` : "0%");

/** A stacked horizontal bar (inline SVG) with one segment per state. */
function timeChart(g) {
  const total = PARTS.reduce((n, [k]) => n + g[k], 0);
  let x = 0;
  const rects = PARTS.map(([k, label, cls]) => {
    const w = total > 0 ? (g[k] / total) * 1000 : 0;
    const r = s("rect", { x, y: 0, width: w, height: 28, class: cls }, s("title", {}, `${label}: ${seconds(g[k])}`));
    x += w;
    return r;
  });
  const label = PARTS.map(([k, l]) => `${l} ${seconds(g[k])}`).join(", ");
  return h("figure", { class: "chart" },
    s("svg", { class: "stacked-bar", viewBox: "0 0 1000 28", preserveAspectRatio: "none", role: "img", "aria-label": `Time by state: ${label}` },
      s("rect", { x: 0, y: 0, width: 1000, height: 28, class: "seg-empty" }), rects),
    h("figcaption", { class: "legend" }, PARTS.map(([k, l, cls]) => h("span", { class: "legend-item" },
      h("span", { class: `swatch ${cls}`, "aria-hidden": "true" }), h("span", {}, l), h("strong", {}, seconds(g[k])), h("span", { class: "muted" }, pct(g[k], total))))));
}

/** Cost by what it pays for: CSS bars scaled to the largest part. */
function costChart(cost) {
  const parts = [["Compute (vCPU, running)", cost.vcpu, "seg-running"], ["Memory (running)", cost.memory, "seg-memory"], ["Storage (cold + checkpoints)", cost.storage, "seg-cold"]];
  const max = Math.max(...parts.map((p) => p[1]), 1e-12);
  return h("div", { class: "bars", role: "img", "aria-label": `Cost: total ${money(cost.total)}; ${parts.map(([l, v]) => `${l} ${money(v)}`).join(", ")}` },
    parts.map(([label, v, cls]) => h("div", { class: "bar-row" },
      h("span", { class: "bar-label" }, label),
      h("span", { class: "bar-track" }, h("span", { class: `bar ${cls}`, style: { width: `${(v / max) * 100}%` } })),
      h("span", { class: "bar-value num" }, money(v)))));
}

export function usageSection(id) {
  const c = card("Usage", { description: "Metered since creation (the open segment included)" });
  let shown = false;

  return {
    el: c.el,
    async refresh(sbx, round) {
      if (shown && round % 3 !== 0) return;
      try {
        const report = await usage(sbx.created_at);
        const g = report.groups.find((x) => x.key === id);
        shown = true;
        if (!g) return fill(c.body, h("p", { class: "muted" }, "No usage metered yet."));
        fill(c.body,
          timeChart(g),
          g.cost ? h("div", { class: "cost" }, h("div", { class: "cost-total" }, h("span", { class: "muted" }, "Cost"), h("strong", {}, money(g.cost.total))), costChart(g.cost)) : null,
          keyValues([
            ["vCPU-seconds", String(g.vcpu_seconds)],
            ["Memory GiB-seconds", String(g.memory_gib_seconds)],
            ["Host CPU used", seconds(g.host_cpu_seconds)],
            ["Den's work for it", seconds(g.den_cpu_seconds)],
            ["Stored", `${small(g.stored_gb_months)} GB-months`],
            g.cost ? null : ["Cost", h("span", { class: "muted" }, "no price table (DEN_PRICE_*)")],
          ]));
      } catch (e) {
        fill(c.body, inlineError(e));
      }
    },
  };
}
