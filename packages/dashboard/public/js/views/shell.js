// The frame around the signed-in views: brand, navigation, live indicator, sign-out.
import { h, s, setText } from "../dom.js";
import { getKey } from "../api.js";
import { LIVE } from "../poll.js";
import { describe } from "../components/errors.js";

export function logo() {
  return s("svg", { class: "logo", viewBox: "0 0 32 32", width: 24, height: 24, "aria-hidden": "true" },
    s("rect", { width: 32, height: 32, rx: 8, class: "logo-bg" }),
    s("path", { class: "logo-mark", d: "M9 23V9h6.2c4.6 0 7.8 2.8 7.8 7s-3.2 7-7.8 7H9zm3.6-3.1h2.4c2.6 0 4.3-1.5 4.3-3.9s-1.7-3.9-4.3-3.9h-2.4v7.8z" }));
}

const masked = (k) => (k && k.length > 10 ? `${k.slice(0, 4)}…${k.slice(-4)}` : "••••");

export function mountShell(root, { onSignOut }) {
  const liveText = h("span", { class: "live-text" }, "Connecting…");
  const live = h("span", { class: "live", role: "status", "aria-label": "Live updates" }, h("span", { class: "dot", "aria-hidden": "true" }), liveText);
  const links = {
    sandboxes: h("a", { href: "#/", class: "nav-link" }, "Sandboxes"),
    templates: h("a", { href: "#/templates", class: "nav-link" }, "Templates"),
    webhooks: h("a", { href: "#/webhooks", class: "nav-link" }, "Webhooks"),
    // Shown once the key is known to be an admin's (setAdmin): an owner's key cannot list hosts.
    hosts: h("a", { href: "#/hosts", class: "nav-link", hidden: true }, "Hosts"),
  };
  const main = h("main", { id: "main", tabindex: "-1", class: "main" });
  const header = h("header", { class: "topbar" },
    h("div", { class: "topbar-inner" },
      h("a", { href: "#/", class: "brand", "aria-label": "Den home" }, logo(), h("span", {}, "Den")),
      h("nav", { class: "nav", "aria-label": "Main" }, Object.values(links)),
      h("div", { class: "topbar-right" },
        live,
        h("span", { class: "key-hint", title: "Signed in with this API key" }, h("span", { class: "muted" }, "Key "), h("code", {}, masked(getKey()))),
        h("button", { type: "button", class: "button button-ghost", onclick: onSignOut }, "Sign out"))));
  root.replaceChildren(header, main);

  let last = null;
  const onLive = (e) => {
    last = e.detail;
    render();
  };
  const render = () => {
    if (!last) return;
    live.classList.toggle("live-down", !last.ok);
    const age = Math.round((Date.now() - last.at) / 1000);
    setText(liveText, last.ok ? (age < 3 ? "Live" : `Live · ${age}s ago`) : `Offline · ${describe(last.error).code}`);
    live.title = last.ok ? `Updated ${new Date(last.at).toLocaleTimeString()}` : describe(last.error).message;
  };
  window.addEventListener(LIVE, onLive);
  const t = setInterval(render, 1000);

  return {
    main,
    /** Shows the admin's sections (Hosts) in the navigation, or hides them. */
    setAdmin(on) {
      links.hosts.hidden = !on;
    },
    /** Marks the current section in the navigation. */
    setSection(name) {
      for (const [section, link] of Object.entries(links)) {
        if (section === name) link.setAttribute("aria-current", "page");
        else link.removeAttribute("aria-current");
      }
    },
    unmount() {
      window.removeEventListener(LIVE, onLive);
      clearInterval(t);
    },
  };
}
