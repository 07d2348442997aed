// Sign in with an API key (kept in sessionStorage: this tab only, gone when it closes).
import { h, fill } from "../dom.js";
import { request, setKey } from "../api.js";
import { errorBox } from "../components/errors.js";
import { logo } from "./shell.js";

export function mountSignIn(root, { onSignedIn, reason }) {
  const input = h("input", { id: "api-key", name: "key", type: "password", autocomplete: "off", spellcheck: "false", required: true, placeholder: "den_…" });
  const status = h("div", { class: "signin-status" });
  const submit = h("button", { type: "submit", class: "button button-primary button-block" }, "Sign in");
  if (reason) fill(status, errorBox(reason, "Signed out"));

  const form = h("form", { class: "signin-form", "aria-label": "Sign in", onsubmit: async (e) => {
    e.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    submit.disabled = true;
    submit.textContent = "Signing in…";
    fill(status);
    try {
      // Any authenticated call checks the key; this one is cheap.
      await request("GET", "/v1/sandboxes?limit=1", undefined, key);
      setKey(key);
      onSignedIn();
    } catch (err) {
      fill(status, errorBox(err, err.status === 401 ? "That API key was refused" : "Could not sign in"));
      submit.disabled = false;
      submit.textContent = "Sign in";
      input.select();
    }
  } },
  h("label", { for: "api-key" }, "API key"),
  input,
  h("p", { class: "hint" }, "Kept in this browser tab only (sessionStorage) and sent to this Den server as ", h("code", {}, "Authorization: Bearer"), "."),
  submit);

  fill(root, h("div", { class: "signin" },
    h("div", { class: "signin-card" },
      h("div", { class: "signin-brand" }, logo(), h("span", {}, "Den")),
      h("h1", {}, "Sign in"),
      h("p", { class: "muted" }, "Long-running microVM sandboxes for AI agents."),
      status,
      form)));
  input.focus();
  return { unmount() {} };
}
