// Ports listening in the sandbox (GET .../ports, which never wakes it), each with a button
// that makes a signed URL (POST .../urls {port}) and links it.
import { h, fill } from "../dom.js";
import { ports as fetchPorts, portUrl } from "../api.js";
import { card } from "../components/card.js";
import { inlineError } from "../components/errors.js";
import { dateTime } from "../format.js";

export function portsSection(id, { onError }) {
  const c = card("Ports", { description: "TCP servers listening inside the guest, reachable through Den" });
  const urls = new Map(); // port -> PortUrl
  let key = "";
  let last = null;

  async function makeUrl(port, button) {
    button.disabled = true;
    button.textContent = "Signing…";
    try {
      urls.set(port, await portUrl(id, port));
      key = "";
      await section.refresh(last);
    } catch (e) {
      onError(e, `Could not make a URL for port ${port}`);
      button.disabled = false;
      button.textContent = "Create signed URL";
    }
  }

  function urlCell(p) {
    const u = urls.get(p.port);
    if (u && Date.parse(u.expires_at) > Date.now()) {
      return h("div", { class: "port-url" },
        h("a", { href: u.url, target: "_blank", rel: "noopener noreferrer", class: "link-strong", "aria-label": `Signed URL for port ${p.port}` }, "Open ↗"),
        h("span", { class: "muted small", title: u.url }, ` expires ${dateTime(u.expires_at)}`),
        h("button", { type: "button", class: "button button-sm button-ghost", "aria-label": `Copy signed URL for port ${p.port}`, onclick: (e) => copy(u.url, e.currentTarget) }, "Copy"));
    }
    const button = h("button", { type: "button", class: "button button-sm", "aria-label": `Create signed URL for port ${p.port}` }, "Create signed URL");
    button.addEventListener("click", () => makeUrl(p.port, button));
    return button;
  }

  async function copy(text, button) {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "Copied";
    } catch {
      button.textContent = "Copy failed";
    }
    setTimeout(() => (button.textContent = "Copy"), 1500);
  }

  const section = {
    el: c.el,
    async refresh(sbx) {
      last = sbx;
      try {
        if (sbx.state !== "running") {
          const k = `state:${sbx.state}`;
          if (k !== key) fill(c.body, h("p", { class: "muted" }, "Ports are listed while the sandbox runs (a request to one wakes it)."));
          key = k;
          return;
        }
        const r = await fetchPorts(id);
        const list = r.ports.sort((a, b) => a.port - b.port);
        const k = JSON.stringify([list, [...urls.keys()]]);
        if (k === key) return;
        key = k;
        if (!list.length) return fill(c.body, h("p", { class: "muted" }, "Nothing is listening. Start a server in the sandbox (any address, any port)."));
        fill(c.body, h("div", { class: "table-scroll" }, h("table", { class: "table table-compact", "aria-label": "Listening ports" },
          h("thead", {}, h("tr", {}, ["Port", "Address", "Process", "URL"].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, list.map((p) => h("tr", {},
            h("td", { class: "mono" }, String(p.port)),
            h("td", { class: "mono small" }, p.address),
            h("td", {}, p.process ?? h("span", { class: "muted" }, "—"), p.pid ? h("span", { class: "muted small" }, ` (pid ${p.pid})`) : null),
            h("td", {}, urlCell(p))))))));
      } catch (e) {
        key = "";
        fill(c.body, inlineError(e));
      }
    },
  };
  return section;
}
