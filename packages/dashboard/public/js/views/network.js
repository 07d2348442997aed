// The network policy (the sandbox's `network`) and refused attempts (GET .../network).
import { h, fill } from "../dom.js";
import { networkStatus } from "../api.js";
import { card, keyValues } from "../components/card.js";
import { chip } from "../components/badge.js";
import { inlineError } from "../components/errors.js";

const EGRESS = {
  none: "No connection leaves the guest",
  allowlist: "Only the allowed destinations",
  open: "Anywhere but the denied ranges",
};

const targets = (list) => (list?.length ? h("span", { class: "chips" }, list.map((t) => chip(t, { class: "chip mono" }))) : h("span", { class: "muted" }, "—"));

export function networkSection(id) {
  const c = card("Network", { description: "Egress policy, enforced on the host" });
  let status = null;
  let statusError = null;

  function render(sbx) {
    const n = sbx.network;
    const refused = status?.refused;
    fill(c.body, keyValues([
      ["Egress", h("span", {}, h("span", { class: `badge badge-sm egress-${n.egress}` }, n.egress), h("span", { class: "muted small" }, ` ${EGRESS[n.egress] ?? ""}`))],
      n.egress === "allowlist" ? ["Allow", targets(n.allow)] : null,
      n.egress === "open" ? ["Deny", targets(n.deny)] : null,
      ["Connections", n.max_connections ? `at most ${n.max_connections} at once` : "server default"],
      ["Bandwidth", n.bandwidth_mbps ? `${n.bandwidth_mbps} Mbit/s each way` : "server default"],
      status ? ["Network up", status.active ? "yes" : "no"] : null,
      refused ? ["Refused", `${refused.private} private · ${refused.policy} policy · ${refused.limit} over limit · ${refused.dns} DNS`] : null,
    ]), statusError ? inlineError(statusError) : null);
  }

  return {
    el: c.el,
    async refresh(sbx, round) {
      // The policy comes with the sandbox; the refusal counters every few rounds.
      if (round % 3 === 0 && sbx.state !== "destroyed") {
        try {
          status = await networkStatus(id);
          statusError = null;
        } catch (e) {
          statusError = e;
        }
      }
      render(sbx);
    },
  };
}
