// API errors shown readably: what failed, the error code, the server's message, details.
import { h } from "../dom.js";

export function describe(err) {
  if (err && err.code) return { code: err.code, status: err.status, message: err.message, details: err.details };
  return { code: "client_error", status: 0, message: String(err?.message ?? err) };
}

/** An alert box; `what` says what was being done ("Could not hibernate"). */
export function errorBox(err, what, onDismiss) {
  const d = describe(err);
  return h("div", { class: "alert alert-error", role: "alert" },
    h("div", { class: "alert-body" },
      h("strong", {}, what ?? "Request failed"),
      h("div", { class: "alert-line" },
        h("code", { class: "error-code" }, d.code),
        d.status ? h("span", { class: "muted" }, ` HTTP ${d.status}`) : null,
        h("span", { class: "error-message" }, ` ${d.message}`)),
      d.details ? h("pre", { class: "error-details" }, JSON.stringify(d.details, null, 2)) : null),
    onDismiss ? h("button", { type: "button", class: "icon-button", "aria-label": "Dismiss error", onclick: onDismiss }, "×") : null);
}

/** A one-line error inside a card (a section that could not load). */
export function inlineError(err) {
  const d = describe(err);
  return h("p", { class: "inline-error", role: "alert" }, h("code", {}, d.code), ` ${d.message}`);
}
