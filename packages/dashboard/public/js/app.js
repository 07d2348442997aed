// Entry point: sign-in or the signed-in shell, and a hash router between the views.
//   #/                          sandboxes (with ?state=...&metadata=k=v,k2=v2)
//   #/sandboxes/<id>            one sandbox
//   #/templates[/<name>]        the templates the key can use, its builds (one template's) and a build's log (?build=<id>)
//   #/webhooks[/<id>]           the owner's webhooks (and one's deliveries)
//   #/hosts                     the deployment's host agents (admin keys only)
import { clearKey, getKey, isAdmin, UNAUTHORIZED } from "./api.js";
import { mountSignIn } from "./views/signin.js";
import { mountShell } from "./views/shell.js";
import { mountSandboxes } from "./views/sandboxes.js";
import { mountSandbox } from "./views/sandbox.js";
import { mountTemplates } from "./views/templates.js";
import { mountWebhooks } from "./views/webhooks.js";
import { mountHosts } from "./views/hosts.js";

const root = document.getElementById("app");
let shell = null;
let view = null;

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, query = ""] = raw.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query) };
}

function unmountView() {
  view?.unmount();
  view = null;
}

function signOut(reason) {
  unmountView();
  shell?.unmount();
  shell = null;
  clearKey();
  document.title = "Sign in · Den";
  view = mountSignIn(root, { reason, onSignedIn: route });
}

/** Asks once per shell whether the key is an admin's, to show the admin's sections; a failure other than 403 asks again at the next route. */
function checkAdmin(s) {
  if (s.admin !== undefined) return;
  s.admin = null; // asking
  isAdmin().then((on) => {
    s.admin = on;
    s.setAdmin(on);
  }, () => (s.admin = undefined));
}

function route() {
  if (!getKey()) return signOut();
  if (!shell) shell = mountShell(root, { onSignOut: () => signOut() });
  checkAdmin(shell);
  unmountView();
  const { parts, query } = parseHash();
  if (parts[0] === "templates") {
    shell.setSection("templates");
    view = mountTemplates(shell.main, { name: parts[1], query });
  } else if (parts[0] === "webhooks") {
    shell.setSection("webhooks");
    view = mountWebhooks(shell.main, { id: parts[1] });
  } else if (parts[0] === "hosts") {
    shell.setSection("hosts");
    view = mountHosts(shell.main);
  } else if (parts[0] === "sandboxes" && parts[1]) {
    shell.setSection("sandbox");
    view = mountSandbox(shell.main, { id: parts[1] });
  } else {
    shell.setSection("sandboxes");
    view = mountSandboxes(shell.main, { query });
  }
}

window.addEventListener("hashchange", route);
window.addEventListener(UNAUTHORIZED, (e) => signOut(e.detail));
route();
