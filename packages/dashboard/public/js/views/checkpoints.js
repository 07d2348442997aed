// Durable checkpoints of the sandbox (GET /v1/checkpoints?sandbox_id=), each restorable into a new sandbox.
import { h, fill } from "../dom.js";
import { checkpoints as fetchCheckpoints, restore } from "../api.js";
import { card } from "../components/card.js";
import { inlineError } from "../components/errors.js";
import { toast } from "../components/toast.js";
import { bytes, dateTime, shortDateTime } from "../format.js";

export function checkpointsSection(id, { onError }) {
  const c = card("Checkpoints", { description: "Durable snapshots in the store; each restores into a new sandbox" });
  let key = "";

  async function onRestore(cp, button) {
    button.disabled = true;
    button.textContent = "Restoring…";
    try {
      const sbx = await restore(cp.id);
      toast(`Restored ${cp.name ?? cp.id} as ${sbx.id}`);
      location.hash = `#/sandboxes/${sbx.id}`;
    } catch (e) {
      onError(e, `Could not restore checkpoint ${cp.id}`);
      button.disabled = false;
      button.textContent = "Restore";
    }
  }

  return {
    el: c.el,
    async refresh() {
      try {
        const list = (await fetchCheckpoints(id)).sort((a, b) => b.created_at.localeCompare(a.created_at));
        const k = JSON.stringify(list);
        if (k === key) return;
        key = k;
        if (!list.length) return fill(c.body, h("p", { class: "muted" }, "No checkpoints. “Snapshot” takes one while the sandbox keeps running."));
        fill(c.body, h("div", { class: "table-scroll" }, h("table", { class: "table table-compact", "aria-label": "Checkpoints" },
          h("thead", {}, h("tr", {}, ["Checkpoint", "Taken", "Stored", "Pause", ""].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, list.map((cp) => {
            const button = h("button", { type: "button", class: "button button-sm", "aria-label": `Restore checkpoint ${cp.name ?? cp.id}` }, "Restore");
            button.addEventListener("click", () => onRestore(cp, button));
            return h("tr", {},
              h("td", {}, h("div", { class: "cell-nowrap" }, cp.name ?? h("span", { class: "muted" }, "unnamed")), h("div", { class: "mono small muted" }, cp.id)),
              h("td", { class: "num", title: dateTime(cp.created_at) }, shortDateTime(cp.created_at)),
              h("td", { class: "num" }, bytes(cp.stored_bytes)),
              h("td", { class: "num" }, `${cp.pause_ms} ms`),
              h("td", { class: "cell-actions" }, button));
          })))));
      } catch (e) {
        key = "";
        fill(c.body, inlineError(e));
      }
    },
  };
}
