// Live data: run a refresh every few seconds (never two at once), paused while the tab is hidden.
// Each run reports to the header's live indicator through a `den:live` event.

export const LIVE = "den:live";

export function poll(fn, everyMs = 2000) {
  let timer, stopped = false, running = null;

  const report = (ok, error) => window.dispatchEvent(new CustomEvent(LIVE, { detail: { ok, error, at: Date.now() } }));

  async function run() {
    clearTimeout(timer);
    if (stopped) return;
    if (running) return running;
    running = (async () => {
      try {
        await fn();
        report(true);
      } catch (e) {
        report(false, e);
      } finally {
        running = null;
        if (!stopped && !document.hidden) timer = setTimeout(run, everyMs);
      }
    })();
    return running;
  }

  const onVisibility = () => {
    if (!document.hidden) void run();
  };
  document.addEventListener("visibilitychange", onVisibility);
  void run();

  return {
    /** Refresh now (after an action); resolves when that refresh is done. */
    now: async () => {
      if (running) await running;
      return run();
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener("visibilitychange", onVisibility);
    },
  };
}

/** Calls fn every second (for countdowns and ages) until stopped. */
export function tick(fn) {
  const t = setInterval(fn, 1000);
  return { stop: () => clearInterval(t) };
}
