// The lifecycle timeline: GET /v1/sandboxes/{id}/events, fetched incrementally (after the last seq).
import { h, fill } from "../dom.js";
import { events as fetchEvents } from "../api.js";
import { card } from "../components/card.js";
import { chip } from "../components/badge.js";
import { inlineError } from "../components/errors.js";
import { clock, dateTime } from "../format.js";

const NOISY = /^(exec\.|transfer\.)/;
const MAX_SHOWN = 500;
const SANDBOX_ID = /^sbx_[a-z2-7]{16}$/;

function value(v) {
  if (typeof v === "string" && SANDBOX_ID.test(v)) return h("a", { href: `#/sandboxes/${v}`, class: "mono" }, v);
  if (Array.isArray(v) && v.every((x) => typeof x === "string" && SANDBOX_ID.test(x))) return v.flatMap((x, i) => [i ? ", " : "", value(x)]);
  if (v !== null && typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function eventItem(e) {
  const data = Object.entries(e.data ?? {});
  return h("li", { class: `event event-${e.type.replace(/[^a-z]/g, "-")}`, dataset: { seq: e.seq } },
    h("span", { class: "event-dot", "aria-hidden": "true" }),
    h("div", { class: "event-main" },
      h("div", { class: "event-head" },
        h("span", { class: "event-type" }, e.type),
        e.reason ? chip(e.reason, { title: "reason" }) : null,
        h("time", { datetime: e.at, title: dateTime(e.at), class: "event-time" }, clock(e.at))),
      data.length ? h("div", { class: "event-data" }, data.map(([k, v]) => h("span", { class: "event-field" }, h("span", { class: "muted" }, `${k}=`), value(v)))) : null));
}

export function timelineSection(id) {
  const c = card("Timeline", { description: "Every transition with its reason, as the server recorded it" });
  const lifecycleOnly = h("input", { type: "checkbox", id: "timeline-lifecycle-only" });
  c.aside.append(h("label", { class: "checkbox", for: lifecycleOnly.id }, lifecycleOnly, "Lifecycle only"));
  const list = h("ol", { class: "timeline", "aria-label": "Lifecycle timeline" });
  const status = h("div");
  let all = [];
  let last = 0;
  let first = true;

  const render = () => {
    const shown = all.filter((e) => !lifecycleOnly.checked || !NOISY.test(e.type)).slice(-MAX_SHOWN).reverse();
    fill(list, shown.map(eventItem));
    if (!shown.length) list.append(h("li", { class: "muted event-empty" }, "No events."));
  };
  lifecycleOnly.addEventListener("change", render);

  return {
    el: c.el,
    async refresh() {
      try {
        const fresh = await fetchEvents(id, last);
        if (first) fill(c.body, status, list);
        status.replaceChildren();
        if (fresh.length || first) {
          first = false;
          all = all.concat(fresh).slice(-2 * MAX_SHOWN);
          if (fresh.length) last = fresh[fresh.length - 1].seq;
          render();
        }
      } catch (e) {
        if (first) fill(c.body, inlineError(e));
        else fill(status, inlineError(e));
      }
    },
  };
}
