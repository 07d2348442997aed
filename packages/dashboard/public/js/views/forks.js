// The fork tree: the parent (metadata forked_from, or the sandbox of the checkpoint in
// restored_from), this sandbox, and its children (sandboxes whose forked_from is this one).
import { h, fill } from "../dom.js";
import { getCheckpoint, getSandbox, listSandboxes } from "../api.js";
import { card } from "../components/card.js";
import { stateBadge } from "../components/badge.js";
import { inlineError } from "../components/errors.js";
import { since } from "../format.js";

function node(sbx, { current = false, note } = {}) {
  return h("div", { class: `tree-node${current ? " tree-current" : ""}` },
    current ? h("span", { class: "mono", "aria-current": "page" }, sbx.id) : h("a", { href: `#/sandboxes/${sbx.id}`, class: "mono" }, sbx.id),
    stateBadge(sbx, { class: "badge badge-sm" }),
    note ? h("span", { class: "muted tree-note" }, note) : null);
}

export function forksSection(id) {
  const c = card("Fork tree", { description: "Where this sandbox came from, and its forks" });
  const checkpointOwners = new Map(); // checkpoint id -> sandbox id (or null when gone)

  async function parentOf(sbx) {
    const forked = sbx.metadata?.forked_from;
    if (forked) return { id: forked, how: "forked from" };
    const cp = sbx.metadata?.restored_from;
    if (!cp) return null;
    if (!checkpointOwners.has(cp)) {
      checkpointOwners.set(cp, await getCheckpoint(cp).then((x) => x.sandbox_id, (e) => (e.status === 404 ? null : Promise.reject(e))));
    }
    return { id: checkpointOwners.get(cp), how: `restored from checkpoint ${cp}`, checkpoint: cp };
  }

  return {
    el: c.el,
    async refresh(sbx) {
      try {
        const [parentRef, children] = await Promise.all([parentOf(sbx), listSandboxes({ metadata: { forked_from: id } })]);
        const parent = parentRef?.id ? await getSandbox(parentRef.id).catch((e) => (e.status === 404 ? null : Promise.reject(e))) : null;
        children.sort((a, b) => a.created_at.localeCompare(b.created_at));
        const self = h("li", {}, node(sbx, { current: true, note: parentRef ? parentRef.how : "root" }),
          children.length
            ? h("ul", { class: "tree", "aria-label": "Forks" }, children.map((k) => h("li", {}, node(k, { note: `${since(k.created_at)} old` }))))
            : null);
        const tree = parent
          ? h("ul", { class: "tree tree-root", "aria-label": "Fork tree" }, h("li", {}, node(parent, { note: "parent" }), h("ul", { class: "tree" }, self)))
          : h("ul", { class: "tree tree-root", "aria-label": "Fork tree" }, parentRef ? h("li", {}, h("div", { class: "tree-node muted" }, parentRef.checkpoint ? `checkpoint ${parentRef.checkpoint} (deleted)` : `${parentRef.id} (not visible)`), h("ul", { class: "tree" }, self)) : self);
        fill(c.body, tree, children.length ? null : h("p", { class: "muted small" }, "No forks. Fork it to try two approaches from the same state."));
      } catch (e) {
        fill(c.body, inlineError(e));
      }
    },
  };
}
