// A titled panel, its body replaced as data arrives.
import { h } from "../dom.js";

let seq = 0;

/** { el, body, aside }: `body` is filled by the section, `aside` holds small controls by the title. */
export function card(title, { description, className = "" } = {}) {
  const id = `card-${++seq}`;
  const body = h("div", { class: "card-body" }, h("p", { class: "muted" }, "Loading…"));
  const aside = h("div", { class: "card-aside" });
  const el = h("section", { class: `card ${className}`, "aria-labelledby": id },
    h("header", { class: "card-header" },
      h("div", {}, h("h2", { id, class: "card-title" }, title), description ? h("p", { class: "card-description" }, description) : null),
      aside),
    body);
  return { el, body, aside };
}

/** A definition list of [term, value] pairs. */
export function keyValues(pairs) {
  return h("dl", { class: "kv" }, pairs.filter(Boolean).map(([k, v]) => h("div", { class: "kv-item" }, h("dt", {}, k), h("dd", {}, v))));
}
