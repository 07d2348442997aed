// State badges (sandboxes, template builds), reason chips and metadata chips.
import { h, setText } from "../dom.js";

/** "running", "hibernated · warm", "hibernated · cold", ... */
export function stateLabel(sbx) {
  return sbx.state === "hibernated" && sbx.hibernate_mode ? `hibernated · ${sbx.hibernate_mode}` : sbx.state;
}

function stateClass(sbx) {
  return sbx.state === "hibernated" ? `state-${sbx.hibernate_mode ?? "warm"}` : `state-${sbx.state}`;
}

const HINTS = {
  creating: "Restoring its template's snapshot",
  running: "Its VM is running",
  "state-warm": "Warm hibernated: snapshot taken, paused in place (instant wake; memory still reserved)",
  "state-cold": "Cold hibernated: its state is in the snapshot store, no VM (zero CPU and RAM)",
  destroyed: "Destroyed",
  lost: "Its VM vanished; recover it from its newest checkpoint",
  error: "It failed",
};

export function stateBadge(sbx, attrs = {}) {
  const el = h("span", { class: "badge", ...attrs }, h("span", { class: "dot", "aria-hidden": "true" }), h("span", { class: "label" }));
  updateStateBadge(el, sbx);
  return el;
}

export function updateStateBadge(el, sbx) {
  const cls = `badge ${stateClass(sbx)}`;
  if (el.className !== cls) el.className = cls;
  setText(el.querySelector(".label"), stateLabel(sbx));
  el.title = HINTS[sbx.state === "hibernated" ? stateClass(sbx) : sbx.state] ?? sbx.state;
}

const BUILD_CLASS = { building: "state-building", waiting: "state-waiting", ready: "state-running", error: "state-error", cancelled: "state-destroyed" };
const BUILD_HINTS = {
  building: "Running in a build microVM",
  waiting: "Announced, not started yet",
  ready: "Built: the template version is usable",
  error: "Failed",
  cancelled: "Cancelled: nothing was kept",
};

/** A template build's state: building, waiting, ready, error, cancelled. */
export function buildBadge(state, attrs = {}) {
  return h("span", { class: `badge badge-sm ${BUILD_CLASS[state] ?? ""}`, title: BUILD_HINTS[state] ?? state, ...attrs },
    h("span", { class: "dot", "aria-hidden": "true" }), h("span", { class: "label" }, state));
}

export function chip(text, attrs = {}) {
  return h("span", { class: "chip", ...attrs }, text);
}

/** key=value chips; `onPick(key, value)` makes each a button (e.g. to filter by it). */
export function metadataChips(metadata, onPick) {
  const entries = Object.entries(metadata ?? {});
  if (!entries.length) return h("span", { class: "muted" }, "—");
  return h("span", { class: "chips" }, entries.map(([k, v]) =>
    onPick
      ? h("button", { type: "button", class: "chip chip-button", title: `Filter by ${k}=${v}`, onclick: (e) => (e.stopPropagation(), onPick(k, v)) }, h("span", { class: "chip-key" }, k), "=", v)
      : h("span", { class: "chip" }, h("span", { class: "chip-key" }, k), "=", v)));
}
