// Modal confirmation dialogs (native <dialog>: focus trapped, Escape cancels).
import { h } from "../dom.js";

let seq = 0;

/**
 * Asks to confirm; resolves with the fields' values ({} without fields), or null when
 * cancelled (its button says `cancelLabel`). fields: [{ name, label, type, value, min, max, placeholder, hint }]
 */
export function confirmDialog({ title, message, confirmLabel = "Confirm", cancelLabel = "Cancel", danger = false, fields = [] }) {
  return new Promise((resolve) => {
    const id = `dlg-${++seq}`;
    const inputs = fields.map((f) => h("input", {
      id: `${id}-${f.name}`, name: f.name, type: f.type ?? "text", value: f.value ?? "", min: f.min, max: f.max,
      placeholder: f.placeholder, required: f.required, maxlength: f.maxlength, autocomplete: "off",
    }));
    const cancel = h("button", { type: "submit", value: "cancel", formnovalidate: true, class: "button" }, cancelLabel);
    const ok = h("button", { type: "submit", value: "confirm", class: danger ? "button button-danger" : "button button-primary" }, confirmLabel);
    const form = h("form", { method: "dialog", class: "dialog-form" },
      h("h2", { id: `${id}-title`, class: "dialog-title" }, title),
      message ? h("div", { id: `${id}-desc`, class: "dialog-message" }, message) : null,
      fields.map((f, i) => h("div", { class: "field" },
        h("label", { for: `${id}-${f.name}` }, f.label),
        inputs[i],
        f.hint ? h("p", { class: "hint" }, f.hint) : null)),
      h("div", { class: "dialog-actions" }, cancel, ok));
    const dlg = h("dialog", { class: "dialog", "aria-labelledby": `${id}-title`, "aria-describedby": message ? `${id}-desc` : undefined }, form);
    dlg.addEventListener("close", () => {
      const values = Object.fromEntries(inputs.map((i) => [i.name, i.value]));
      resolve(dlg.returnValue === "confirm" ? values : null);
      dlg.remove();
    });
    document.body.append(dlg);
    dlg.returnValue = "";
    dlg.showModal();
    // A destructive action starts on Cancel; otherwise on the first field.
    (danger || !inputs.length ? cancel : inputs[0]).focus();
  });
}
