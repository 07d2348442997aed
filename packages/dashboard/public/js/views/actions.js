// The sandbox's actions: hibernate (warm/cold), wake, snapshot, fork, destroy (confirmed).
import { h } from "../dom.js";
import * as api from "../api.js";
import { confirmDialog } from "../components/dialog.js";
import { toast } from "../components/toast.js";

/** Which actions a state allows (the server decides in the end; this avoids pointless clicks). */
function allowed(sbx) {
  const st = sbx.state, mode = sbx.hibernate_mode;
  const live = st === "running" || st === "hibernated";
  return {
    warm: st === "running",
    cold: st === "running" || (st === "hibernated" && mode === "warm"),
    wake: st === "hibernated",
    snapshot: live,
    fork: live,
    destroy: st !== "destroyed",
  };
}

export function actionBar(id, { onDone, onError }) {
  let sbx = null;
  let busy = false;
  const buttons = {};

  const button = (key, label, title, run, cls = "button") => {
    const b = h("button", { type: "button", class: cls, title, dataset: { label } }, label);
    b.addEventListener("click", async () => {
      if (busy) return;
      const go = await run.prepare?.();
      if (go === null) return;
      busy = true;
      b.textContent = run.busy;
      b.setAttribute("aria-busy", "true");
      update(sbx);
      const t0 = performance.now();
      try {
        const msg = await run.act(go);
        toast(`${msg} (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
      } catch (e) {
        onError(e, `Could not ${run.verb}`);
      } finally {
        busy = false;
        b.textContent = label;
        b.removeAttribute("aria-busy");
        await onDone();
      }
    });
    buttons[key] = b;
    return b;
  };

  const el = h("div", { class: "toolbar", role: "toolbar", "aria-label": "Sandbox actions" },
    h("div", { class: "button-group", role: "group", "aria-label": "Hibernate" },
      button("warm", "Hibernate warm", "Snapshot and pause in place: wakes at once, keeps its memory reserved", {
        verb: "hibernate", busy: "Hibernating…",
        act: async () => (await api.hibernate(id, "warm"), `Hibernated ${id} (warm)`),
      }),
      button("cold", "Hibernate cold", "Snapshot to the store and stop the VM: no CPU or memory held; wake restores it", {
        verb: "hibernate", busy: "Hibernating…",
        act: async () => (await api.hibernate(id, "cold"), `Hibernated ${id} (cold)`),
      })),
    button("wake", "Wake", "Resume it (from the store if cold)", {
      verb: "wake", busy: "Waking…",
      act: async () => (await api.wake(id), `Woke ${id}`),
    }),
    button("snapshot", "Snapshot", "A durable checkpoint; the sandbox keeps running (a hibernated one wakes first)", {
      verb: "take a checkpoint", busy: "Snapshotting…",
      prepare: () => confirmDialog({
        title: "Take a checkpoint",
        message: "A durable snapshot of its memory and disk in the store. The sandbox keeps running.",
        confirmLabel: "Take checkpoint",
        fields: [{ name: "name", label: "Name (optional)", placeholder: "tests-pass", maxlength: 128 }],
      }),
      act: async (v) => {
        const cp = await api.checkpoint(id, v.name.trim() || undefined);
        return `Checkpoint ${cp.name ?? cp.id} taken`;
      },
    }),
    button("fork", "Fork", "Copies with its exact state, each its own sandbox", {
      verb: "fork", busy: "Forking…",
      prepare: () => confirmDialog({
        title: "Fork sandbox",
        message: "Each child starts with this sandbox's memory, processes and files, its metadata plus forked_from.",
        confirmLabel: "Fork",
        fields: [{ name: "count", label: "Number of forks", type: "number", value: "1", min: 1, max: 16, required: true }],
      }),
      act: async (v) => {
        const kids = await api.fork(id, Number(v.count) || 1);
        return `Forked into ${kids.map((k) => k.id).join(", ")}`;
      },
    }),
    button("destroy", "Destroy", "Stop its VM and delete its state (checkpoints are kept)", {
      verb: "destroy", busy: "Destroying…",
      prepare: () => confirmDialog({
        title: "Destroy sandbox",
        message: h("div", {}, h("p", {}, "Destroy ", h("code", {}, id), "?"), h("p", { class: "muted" }, "Its VM stops and its memory, processes and files are deleted. Its checkpoints are kept. This cannot be undone.")),
        confirmLabel: "Destroy",
        danger: true,
      }),
      act: async () => (await api.destroy(id), `Destroyed ${id}`),
    }, "button button-danger-outline"));

  function update(next) {
    sbx = next;
    if (!sbx) return;
    const ok = allowed(sbx);
    for (const [k, b] of Object.entries(buttons)) b.disabled = busy || !ok[k];
  }

  return { el, update };
}
