// One template build's log (GET /v1/templates/builds/{id}/logs, JSON lines): a running
// build's followed live (`follow=true`, picked up again after a break from the last line
// seen), an ended one's read once as kept. Every line is text, never markup.
import { h, fill, setText } from "../dom.js";
import { buildLog } from "../api.js";
import { card } from "../components/card.js";
import { buildBadge } from "../components/badge.js";
import { inlineError } from "../components/errors.js";
import { clock, dateTime, plural } from "../format.js";

export const RUNNING = new Set(["building", "waiting"]);
const MAX_SHOWN = 5000;
const RETRY_MS = 3000; // between reads of a log that has more to come

export function buildLogSection({ onEnded }) {
  const c = card("Build log", { description: "Pick a build's Log" });
  const description = c.el.querySelector(".card-description");
  const status = h("span", { class: "log-status muted small", role: "status", "aria-label": "Log status" });
  c.aside.append(status);
  fill(c.body, h("p", { class: "muted" }, "Pick a build to read its log."));
  let shown; // the id of the build shown (null: none yet)
  let current = null; // the shown build: { id, build, ctrl, next (offset), count, dropped, pending, reading, ... }

  function stop() {
    if (!current) return;
    current.ctrl.abort();
    clearTimeout(current.timer);
    current = null;
  }

  function lineItem(l) {
    return h("li", { class: `log-line${l.level === "error" ? " log-error" : ""}`, dataset: { seq: l.seq } },
      h("time", { class: "log-time", datetime: l.at, title: dateTime(l.at) }, clock(l.at)),
      h("span", { class: "log-message" }, l.message));
  }

  // Lines arrive many to a chunk: they are added together, the view kept at the bottom if it was there.
  function flush(cur) {
    cur.timer = undefined;
    if (cur !== current || !cur.pending.length) return;
    const box = cur.list;
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 24;
    box.querySelector(".log-empty")?.remove();
    box.append(...cur.pending.map(lineItem));
    cur.pending = [];
    while (box.children.length > MAX_SHOWN) {
      box.firstElementChild.remove();
      cur.dropped++;
    }
    setText(cur.droppedNote, cur.dropped ? `${plural(cur.dropped, "earlier line")} not shown` : "");
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  function renderStatus(cur, text, live = false) {
    if (cur !== current) return;
    setText(status, text);
    status.classList.toggle("log-following", live);
  }

  async function read(cur) {
    const follow = RUNNING.has(cur.build.state);
    cur.reading = true;
    cur.failed = false;
    renderStatus(cur, follow ? "Following live" : "Loading…", follow);
    try {
      await buildLog(cur.id, { offset: cur.next || undefined, follow, signal: cur.ctrl.signal }, (l) => {
        if (cur !== current) return;
        if (typeof l.seq === "number") cur.next = l.seq + 1;
        cur.count++;
        cur.pending.push(l);
        cur.timer ??= setTimeout(() => flush(cur), 30);
      });
      if (cur !== current) return;
      clearTimeout(cur.timer);
      flush(cur);
      fill(cur.errorSlot);
      if (!cur.count) cur.list.replaceChildren(h("li", { class: "muted log-empty" }, "No log lines."));
      renderStatus(cur, plural(cur.count, "line"));
      // A followed log ends with its build: the page looks again (`update` follows on if it has not ended after all).
      if (follow) onEnded?.(cur.id);
    } catch (e) {
      if (cur !== current || cur.ctrl.signal.aborted) return;
      fill(cur.errorSlot, inlineError(e));
      renderStatus(cur, "");
      cur.failed = true;
      if (e.status === 404 || e.status === 401) cur.gone = true;
    } finally {
      cur.reading = false;
      cur.lastRead = Date.now();
    }
  }

  return {
    el: c.el,
    /** The build whose log is shown (null: none); the same build again changes nothing. */
    show(build) {
      const id = build?.id ?? null;
      if (shown === id) return;
      shown = id;
      stop();
      if (!build) {
        setText(description, "Pick a build's Log");
        renderStatus(null, "");
        fill(c.body, h("p", { class: "muted" }, "Pick a build to read its log."));
        return;
      }
      const list = h("ol", { class: "build-log", "aria-label": `Log of build ${build.id}`, tabindex: "0" },
        h("li", { class: "muted log-empty" }, RUNNING.has(build.state) ? "Waiting for the build's first line…" : "Loading…"));
      const cur = current = {
        id: build.id, build, ctrl: new AbortController(), next: 0, count: 0, dropped: 0, pending: [], list, reading: false, failed: false, gone: false, lastRead: 0,
        droppedNote: h("p", { class: "muted small" }), errorSlot: h("div"),
      };
      fill(description, h("span", { class: "mono" }, build.name), " · ", h("span", { class: "mono" }, build.id), " ", buildBadge(build.state));
      fill(c.body, cur.errorSlot, cur.droppedNote, list);
      void read(cur);
    },
    /** A build that could not be found (or read): why, in place of its log. */
    fail(id, err) {
      shown = undefined;
      stop();
      setText(description, id);
      renderStatus(null, "");
      fill(c.body, inlineError(err));
    },
    /**
     * The shown build's latest row: its state in the header. A log not being read that has
     * more to come (its build still runs: the stream broke off, or the build was waiting) or
     * that failed to load is read again from the last line seen.
     */
    update(build) {
      const cur = current;
      if (!cur || cur.id !== build.id) return;
      cur.build = build;
      const badge = description.querySelector(".badge");
      if (badge && badge.querySelector(".label").textContent !== build.state) badge.replaceWith(buildBadge(build.state));
      if (!cur.reading && !cur.gone && (RUNNING.has(build.state) || cur.failed) && Date.now() - cur.lastRead >= RETRY_MS) void read(cur);
    },
    unmount() {
      shown = undefined;
      stop();
    },
  };
}
