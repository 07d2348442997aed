// Webhooks: the owner's (GET /v1/webhooks), a form to add one (its signing secret shown once),
// delete (confirmed), and one webhook's deliveries (GET .../deliveries, newest first), each
// redeliverable. Refreshed every 2 s like the other views. The chosen webhook is kept in the
// address (#/webhooks/<id>) without a new history entry or a remount, so a secret on screen
// is not lost by looking at deliveries.
import { h, fill, setText } from "../dom.js";
import * as api from "../api.js";
import { poll } from "../poll.js";
import { card } from "../components/card.js";
import { chip } from "../components/badge.js";
import { confirmDialog } from "../components/dialog.js";
import { errorBox, inlineError } from "../components/errors.js";
import { toast } from "../components/toast.js";
import { clock, dateTime, plural, shortDateTime } from "../format.js";

/** What a webhook can be told (the protocol's WebhookEventType). */
export const EVENT_TYPES = [
  "sandbox.created", "sandbox.hibernated", "sandbox.woken", "sandbox.destroyed", "sandbox.lost", "sandbox.recovered",
  "sandbox.error", "sandbox.forked", "checkpoint.created", "checkpoint.deleted", "network.refused", "sandbox.refused",
];

const STATUSES = [["", "All"], ["pending", "Pending"], ["delivered", "Delivered"], ["failed", "Failed"]];
const STATUS_CLASS = { delivered: "state-running", pending: "state-warm", failed: "state-error" };
const STATUS_HINT = {
  delivered: "The receiver answered 2xx",
  pending: "Not delivered yet: retried with backoff",
  failed: "Given up after the retry window",
};
const PAGE = 50;

const allEvents = (w) => EVENT_TYPES.every((t) => w.events.includes(t));

function statusBadge(status) {
  return h("span", { class: `badge badge-sm ${STATUS_CLASS[status] ?? ""}`, title: STATUS_HINT[status] ?? status },
    h("span", { class: "dot", "aria-hidden": "true" }), h("span", { class: "label" }, status));
}

async function copy(text, button) {
  const label = button.textContent;
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  } catch {
    button.textContent = "Copy failed";
  }
  setTimeout(() => (button.textContent = label), 1500);
}

export function mountWebhooks(root, { id }) {
  document.title = "Webhooks · Den";
  let webhooks = [];
  let loaded = false;
  let selected = id ?? null;
  let statusFilter = "";
  let want = PAGE; // deliveries to show: "Show older" adds a page
  let listKey = "";
  let deliveriesKey = "";

  const summary = h("p", { class: "muted page-subtitle", "aria-live": "polite" }, "Loading…");
  const errorSlot = h("div", { class: "error-slot" });
  const showError = (e, what) => fill(errorSlot, errorBox(e, what, () => fill(errorSlot)));

  // ---- the list ----
  const listCard = card("Your webhooks", { description: "Every key of this owner sees the same webhooks" });

  function renderList() {
    const k = JSON.stringify([webhooks, selected]);
    if (k === listKey) return;
    listKey = k;
    setText(summary, loaded ? plural(webhooks.length, "webhook") : "Loading…");
    if (!loaded) return;
    if (!webhooks.length) {
      return fill(listCard.body, h("p", { class: "muted" }, "No webhooks yet. Add one here, with ", h("code", {}, "den webhook add URL"), " or ", h("code", {}, "POST /v1/webhooks"), "."));
    }
    fill(listCard.body, h("div", { class: "table-scroll" }, h("table", { class: "table table-compact", "aria-label": "Webhooks" },
      h("thead", {}, h("tr", {}, ["Webhook", "Events", "Created", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, webhooks.map((w) => {
        const show = h("button", { type: "button", class: "button button-sm", "aria-pressed": String(w.id === selected), "aria-label": `Deliveries of ${w.id}` }, "Deliveries");
        show.addEventListener("click", () => select(w.id === selected ? null : w.id));
        const del = h("button", { type: "button", class: "button button-sm button-danger-outline", "aria-label": `Delete ${w.id}` }, "Delete");
        del.addEventListener("click", () => onDelete(w, del));
        return h("tr", { dataset: { id: w.id }, class: w.id === selected ? "row-selected" : undefined },
          h("td", { class: "cell-webhook" },
            h("div", { class: "webhook-url" }, w.url),
            h("div", { class: "mono small muted" }, w.id),
            w.description ? h("div", { class: "small" }, w.description) : null),
          h("td", {}, allEvents(w) ? h("span", { class: "muted" }, "All events") : h("span", { class: "chips" }, w.events.map((e) => chip(e)))),
          h("td", { class: "num", title: dateTime(w.created_at) }, shortDateTime(w.created_at)),
          h("td", { class: "cell-actions cell-nowrap" }, show, " ", del));
      })))));
  }

  async function onDelete(w, button) {
    const go = await confirmDialog({
      title: "Delete webhook",
      message: h("div", {}, h("p", {}, "Delete ", h("code", {}, w.id), "?"), h("p", { class: "muted webhook-url" }, w.url),
        h("p", { class: "muted" }, "Nothing more is delivered to it, pending deliveries included. This cannot be undone.")),
      confirmLabel: "Delete",
      danger: true,
    });
    if (go === null) return;
    button.disabled = true;
    button.setAttribute("aria-busy", "true");
    try {
      await api.deleteWebhook(w.id);
      toast(`Deleted webhook ${w.id}`);
      if (selected === w.id) select(null);
      listKey = "";
      await poller.now();
    } catch (e) {
      showError(e, `Could not delete webhook ${w.id}`);
      button.disabled = false;
      button.removeAttribute("aria-busy");
    }
  }

  // ---- the add form ----
  const addCard = card("Add a webhook", { description: "Den POSTs this owner's events to it as JSON, signed the Standard Webhooks way" });
  const urlInput = h("input", { id: "webhook-url", name: "url", type: "url", required: true, maxlength: 2048, placeholder: "https://example.com/den-events", spellcheck: "false", autocomplete: "off" });
  const descInput = h("input", { id: "webhook-description", name: "description", type: "text", maxlength: 256, placeholder: "Optional", autocomplete: "off" });
  const boxes = EVENT_TYPES.map((t) => h("input", { type: "checkbox", name: "events", value: t, id: `webhook-event-${t.replace(".", "-")}`, checked: true }));
  const eventsError = h("p", { class: "field-error", id: "webhook-events-error", "aria-live": "polite" });
  const setAll = (on) => boxes.forEach((b) => (b.checked = on));
  const submit = h("button", { type: "submit", class: "button button-primary" }, "Add webhook");
  const formError = h("div", { class: "error-slot" });
  const secretSlot = h("div", { class: "secret-slot" });
  const form = h("form", { class: "webhook-form", "aria-label": "Add a webhook", onsubmit: (e) => (e.preventDefault(), add()) },
    h("div", { class: "field" },
      h("label", { for: urlInput.id }, "URL"),
      urlInput,
      h("p", { class: "hint" }, "http or https, at a public address (redirects are not followed).")),
    h("div", { class: "field" }, h("label", { for: descInput.id }, "Description"), descInput),
    h("fieldset", { class: "event-picker", "aria-describedby": eventsError.id },
      h("legend", {}, "Events"),
      h("div", { class: "event-grid" }, boxes.map((b) => h("label", { class: "checkbox", for: b.id }, b, h("span", { class: "mono" }, b.value)))),
      h("div", { class: "toolbar" },
        h("button", { type: "button", class: "button button-sm button-ghost", onclick: () => setAll(true) }, "All"),
        h("button", { type: "button", class: "button button-sm button-ghost", onclick: () => setAll(false) }, "None")),
      eventsError),
    formError,
    h("div", { class: "form-actions" }, submit));
  fill(addCard.body, h("div", { class: "webhook-add" }, secretSlot, form));

  function secretBox(w) {
    const secret = h("code", { class: "secret", id: "webhook-secret" }, w.secret ?? "");
    const copyButton = h("button", { type: "button", class: "button button-sm", "aria-label": "Copy the signing secret" }, "Copy");
    copyButton.addEventListener("click", () => copy(w.secret ?? "", copyButton));
    return h("div", { class: "alert alert-success", role: "region", "aria-label": "Signing secret" },
      h("div", { class: "alert-body" },
        h("strong", {}, `Webhook ${w.id} added. Its signing secret:`),
        h("div", { class: "secret-row" }, secret, copyButton),
        h("p", { class: "hint" }, "Shown only this once: keep it now, it is not shown again. Verify each delivery with it, e.g. ",
          h("code", {}, "new Webhook(secret).verify(body, headers)"), " from the ", h("code", {}, "standardwebhooks"), " package.")),
      h("button", { type: "button", class: "icon-button", "aria-label": "Dismiss the secret", onclick: () => fill(secretSlot) }, "×"));
  }

  async function add() {
    const events = boxes.filter((b) => b.checked).map((b) => b.value);
    if (!events.length) {
      setText(eventsError, "Pick at least one event.");
      return;
    }
    setText(eventsError, "");
    fill(formError);
    submit.disabled = true;
    submit.setAttribute("aria-busy", "true");
    submit.textContent = "Adding…";
    try {
      const w = await api.createWebhook({ url: urlInput.value.trim(), events: events.length === EVENT_TYPES.length ? undefined : events, description: descInput.value.trim() });
      fill(secretSlot, secretBox(w));
      urlInput.value = "";
      descInput.value = "";
      setAll(true);
      toast(`Added webhook ${w.id}`);
      listKey = "";
      await poller.now();
    } catch (e) {
      fill(formError, errorBox(e, "Could not add the webhook", () => fill(formError)));
    } finally {
      submit.disabled = false;
      submit.removeAttribute("aria-busy");
      submit.textContent = "Add webhook";
    }
  }

  // ---- one webhook's deliveries ----
  const deliveriesCard = card("Deliveries", { description: "Newest first" });
  const deliveriesFor = deliveriesCard.el.querySelector(".card-description");
  const statusSelect = h("select", { id: "deliveries-status", name: "status" }, STATUSES.map(([v, label]) => h("option", { value: v }, label)));
  statusSelect.addEventListener("change", () => {
    statusFilter = statusSelect.value;
    want = PAGE;
    deliveriesKey = "";
    fill(deliveriesCard.body, h("p", { class: "muted" }, "Loading…"));
    void poller.now();
  });
  deliveriesCard.aside.append(h("div", { class: "field-inline" }, h("label", { for: statusSelect.id }, "Status"), statusSelect));

  function select(next) {
    selected = next;
    want = PAGE;
    deliveriesKey = "";
    history.replaceState(null, "", next ? `#/webhooks/${encodeURIComponent(next)}` : "#/webhooks");
    renderSelection();
    renderList();
    if (next) void poller.now();
  }

  function renderSelection() {
    deliveriesCard.el.hidden = !selected;
    if (!selected) return;
    const w = webhooks.find((x) => x.id === selected);
    setText(deliveriesFor, w ? `${w.url} · newest first` : `${selected} · newest first`);
    if (!deliveriesKey) fill(deliveriesCard.body, h("p", { class: "muted" }, "Loading…"));
  }

  async function onRedeliver(d, button) {
    button.disabled = true;
    button.setAttribute("aria-busy", "true");
    button.textContent = "Queuing…";
    try {
      const again = await api.redeliver(d.webhook_id, d.id);
      toast(`${d.type} queued again as ${again.id}`);
      deliveriesKey = "";
      await poller.now();
    } catch (e) {
      showError(e, `Could not redeliver ${d.id}`);
      button.disabled = false;
      button.removeAttribute("aria-busy");
      button.textContent = "Redeliver";
    }
  }

  function timeCell(d) {
    const detail = d.status === "delivered" && d.delivered_at ? `delivered ${clock(d.delivered_at)}`
      : d.status === "pending" && d.next_attempt_at ? `next try ${shortDateTime(d.next_attempt_at)}`
      : d.status === "failed" ? "gave up" : null;
    const title = [`Created ${dateTime(d.created_at)}`, d.last_attempt_at ? `last attempt ${dateTime(d.last_attempt_at)}` : null,
      d.next_attempt_at ? `next attempt ${dateTime(d.next_attempt_at)}` : null, d.delivered_at ? `delivered ${dateTime(d.delivered_at)}` : null].filter(Boolean).join("; ");
    return h("td", { class: "num", title }, h("div", { class: "cell-nowrap" }, shortDateTime(d.created_at)), detail ? h("div", { class: "small muted cell-nowrap" }, detail) : null);
  }

  function renderDeliveries(list, more) {
    if (!list.length) {
      return fill(deliveriesCard.body, h("p", { class: "muted" }, statusFilter ? `No ${statusFilter} deliveries.` : "No deliveries yet: one is made for each subscribed event from now on."));
    }
    const older = more ? h("button", { type: "button", class: "button button-sm", onclick: () => ((want += PAGE), (deliveriesKey = ""), void poller.now()) }, "Show older") : null;
    fill(deliveriesCard.body,
      h("div", { class: "table-scroll" }, h("table", { class: "table table-compact", "aria-label": "Deliveries" },
        h("thead", {}, h("tr", {}, ["Event", "Sandbox", "Status", "Attempts", "HTTP", "Error", "Time", ""].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, list.map((d) => {
          const again = h("button", { type: "button", class: "button button-sm", "aria-label": `Redeliver ${d.id}`, title: "A new delivery of the same message (same webhook-id)" }, "Redeliver");
          again.addEventListener("click", () => onRedeliver(d, again));
          return h("tr", { dataset: { id: d.id } },
            h("td", {}, h("div", { class: "mono cell-nowrap" }, d.type), h("div", { class: "mono small muted", title: "webhook-id (the same for every attempt and redelivery)" }, d.message_id)),
            h("td", { class: "cell-id" }, d.sandbox_id ? h("a", { href: `#/sandboxes/${encodeURIComponent(d.sandbox_id)}`, class: "mono" }, d.sandbox_id) : h("span", { class: "muted" }, "—")),
            h("td", {}, statusBadge(d.status)),
            h("td", { class: "num" }, String(d.attempts)),
            h("td", { class: "num" }, d.response_status === null ? h("span", { class: "muted" }, "—") : String(d.response_status)),
            h("td", { class: "cell-error small", title: d.error ?? "" }, d.error ?? h("span", { class: "muted" }, "—")),
            timeCell(d),
            h("td", { class: "cell-actions" }, again));
        })))),
      older ? h("div", { class: "table-more" }, older) : null);
  }

  const gone = (whId) => h("p", { class: "muted" }, h("code", {}, whId), " does not exist (deleted, or another owner's).");

  async function refreshDeliveries() {
    const sel = selected, st = statusFilter, n = want;
    const still = () => sel === selected && st === statusFilter && n === want;
    try {
      const list = [];
      let cursor;
      let more = false;
      do {
        const page = await api.webhookDeliveries(sel, { status: st || undefined, limit: PAGE, cursor });
        list.push(...page.deliveries);
        cursor = page.next_cursor ?? undefined;
        more = Boolean(cursor);
      } while (more && list.length < n && still());
      if (!still()) return;
      const k = JSON.stringify([list, more]);
      if (k === deliveriesKey) return;
      deliveriesKey = k;
      renderDeliveries(list, more);
    } catch (e) {
      if (!still()) return;
      deliveriesKey = "";
      if (e.status === 404) {
        fill(deliveriesCard.body, gone(sel));
        deliveriesKey = "gone";
        return;
      }
      fill(deliveriesCard.body, inlineError(e));
    }
  }

  fill(root, h("div", { class: "page" },
    h("div", { class: "page-header" }, h("div", {}, h("h1", {}, "Webhooks"), summary)),
    errorSlot,
    h("div", { class: "detail-grid" },
      h("div", { class: "detail-col" }, listCard.el),
      h("div", { class: "detail-col" }, addCard.el)),
    deliveriesCard.el));
  renderSelection();

  const poller = poll(async () => {
    try {
      webhooks = await api.webhooks();
    } catch (e) {
      showError(e, "Could not load webhooks");
      errorSlot.firstElementChild.dataset.poll = "1"; // cleared by the next good refresh
      throw e;
    }
    if (errorSlot.querySelector("[data-poll]")) fill(errorSlot);
    loaded = true;
    renderList();
    if (selected) {
      renderSelection();
      if (webhooks.some((w) => w.id === selected)) await refreshDeliveries();
      else if (deliveriesKey !== "gone") {
        deliveriesKey = "gone";
        fill(deliveriesCard.body, gone(selected));
      }
    }
  });

  return {
    unmount() {
      poller.stop();
    },
  };
}
