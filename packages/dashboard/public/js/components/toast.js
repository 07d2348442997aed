// Short notices in the corner (a polite live region reads them out).
import { h } from "../dom.js";

export function toast(message, kind = "success", ms = 5000) {
  const region = document.getElementById("toasts");
  if (!region) return;
  const el = h("div", { class: `toast toast-${kind}` },
    h("span", { class: "toast-text" }, message),
    h("button", { type: "button", class: "icon-button", "aria-label": "Dismiss notification", onclick: () => el.remove() }, "×"));
  region.append(el);
  setTimeout(() => el.remove(), ms);
}
