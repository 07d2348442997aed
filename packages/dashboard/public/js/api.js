// The Den API over fetch: the key from sessionStorage as `Authorization: Bearer`, errors as ApiError.

const KEY = "den.apiKey";

export const getKey = () => sessionStorage.getItem(KEY);
export const setKey = (k) => sessionStorage.setItem(KEY, k);
export const clearKey = () => sessionStorage.removeItem(KEY);

/** An error answer of the API: `{error: {code, message, details?}}` with its HTTP status. */
export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** Fired on `window` when the key stops working, so the app can ask for another. */
export const UNAUTHORIZED = "den:unauthorized";

export async function request(method, path, body, key = getKey()) {
  const headers = { accept: "application/json" };
  if (key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
  } catch (e) {
    throw new ApiError(0, "network_error", `could not reach the Den server (${e.message})`);
  }
  const text = await res.text();
  let json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  if (!res.ok) throw failed(res, json, text, key);
  return json;
}

/** The ApiError of an error answer (a 401 of the current key also tells the app). */
function failed(res, json, text, key) {
  const e = json?.error;
  const err = new ApiError(res.status, e?.code ?? `http_${res.status}`, e?.message ?? (text.slice(0, 300) || res.statusText), e?.details);
  if (res.status === 401 && key === getKey()) window.dispatchEvent(new CustomEvent(UNAUTHORIZED, { detail: err }));
  return err;
}

/**
 * A GET answered with JSON lines (NDJSON), each parsed object handed to `onLine` as it
 * arrives; keepalive lines are skipped. Resolves when the answer ends; `signal` aborts it.
 */
export async function jsonLines(path, onLine, { signal, key = getKey() } = {}) {
  const headers = { accept: "application/x-ndjson" };
  if (key) headers.authorization = `Bearer ${key}`;
  let res;
  try {
    res = await fetch(path, { headers, cache: "no-store", signal });
  } catch (e) {
    if (signal?.aborted) throw e;
    throw new ApiError(0, "network_error", `could not reach the Den server (${e.message})`);
  }
  if (!res.ok) {
    const text = await res.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    throw failed(res, json, text, key);
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = "";
  const take = (line) => {
    if (!line.trim()) return;
    let obj;
    try {
      obj = JSON.parse(line);
    } catch {
      return; // not a JSON line: nothing to show
    }
    if (obj && obj.type !== "keepalive") onLine(obj);
  };
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new ApiError(0, "network_error", `the stream broke off (${e.message})`);
    }
    if (chunk.done) break;
    rest += chunk.value;
    const lines = rest.split("\n");
    rest = lines.pop();
    lines.forEach(take);
  }
  take(rest);
}

const q = (params) => {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") u.set(k, String(v));
  const s = u.toString();
  return s ? `?${s}` : "";
};
const sbx = (id) => `/v1/sandboxes/${encodeURIComponent(id)}`;

/** Every page of a sandbox listing (at most 2,000 sandboxes). */
export async function listSandboxes({ state, metadata = {} } = {}) {
  const params = { state, limit: 200 };
  for (const [k, v] of Object.entries(metadata)) params[`metadata.${k}`] = v;
  const out = [];
  let cursor;
  for (let page = 0; page < 10; page++) {
    const r = await request("GET", `/v1/sandboxes${q({ ...params, cursor })}`);
    out.push(...r.sandboxes);
    if (!r.next_cursor) break;
    cursor = r.next_cursor;
  }
  return out;
}

export const getSandbox = (id) => request("GET", sbx(id));
export const events = (id, after = 0) => request("GET", `${sbx(id)}/events${q({ after })}`).then((r) => r.events);
export const hibernate = (id, mode) => request("POST", `${sbx(id)}/hibernate`, { mode });
export const wake = (id) => request("POST", `${sbx(id)}/wake`);
export const destroy = (id) => request("DELETE", sbx(id));
export const fork = (id, count) => request("POST", `${sbx(id)}/fork`, { count }).then((r) => r.sandboxes);
export const checkpoint = (id, name) => request("POST", `${sbx(id)}/checkpoints`, name ? { name } : {});
export const checkpoints = (id) => request("GET", `/v1/checkpoints${q({ sandbox_id: id })}`).then((r) => r.checkpoints);
export const getCheckpoint = (id) => request("GET", `/v1/checkpoints/${encodeURIComponent(id)}`);
export const ports = (id) => request("GET", `${sbx(id)}/ports`);
export const portUrl = (id, port) => request("POST", `${sbx(id)}/urls`, { port });
export const networkStatus = (id) => request("GET", `${sbx(id)}/network`);
export const usage = (from) => request("GET", `/v1/usage${q({ group_by: "sandbox", from })}`);
export const restore = (checkpointId) => request("POST", `/v1/checkpoints/${encodeURIComponent(checkpointId)}/restore`, {});

// Webhooks (owner-scoped: a key sees only its owner's).
const wh = (id) => `/v1/webhooks/${encodeURIComponent(id)}`;
export const webhooks = () => request("GET", "/v1/webhooks").then((r) => r.webhooks);
/** The answer's `secret` is only in this response. `events` undefined: every event type. */
export const createWebhook = ({ url, events, description }) => request("POST", "/v1/webhooks", { url, events, description: description || undefined });
export const deleteWebhook = (id) => request("DELETE", wh(id));
/** One page, newest first: { deliveries, next_cursor }. */
export const webhookDeliveries = (id, { status, limit = 50, cursor } = {}) => request("GET", `${wh(id)}/deliveries${q({ status, limit, cursor })}`);
export const redeliver = (id, deliveryId) => request("POST", `${wh(id)}/deliveries/${encodeURIComponent(deliveryId)}/redeliver`);

// Templates: the host's own (everyone's) and the caller's, with the caller's builds.
const build = (id) => `/v1/templates/builds/${encodeURIComponent(id)}`;
export const templates = () => request("GET", "/v1/templates").then((r) => r.templates);
/** Newest first; `name` undefined: every build of the caller's. */
export const templateBuilds = (name, limit = 50) => request("GET", `/v1/templates/builds${q({ name, limit })}`).then((r) => r.builds);
export const templateBuild = (id) => request("GET", build(id));
export const cancelBuild = (id) => request("POST", `${build(id)}/cancel`);
/** A build's log lines ({seq, at, level, message}) from `offset`; `follow` streams until the build ends. */
export const buildLog = (id, { offset, follow, signal }, onLine) => jsonLines(`${build(id)}/logs${q({ offset, follow: follow ? "true" : undefined })}`, onLine, { signal });

// Hosts (admin only: an owner's key is answered 403 forbidden).
const hst = (id) => `/v1/hosts/${encodeURIComponent(id)}`;
export const hosts = () => request("GET", "/v1/hosts").then((r) => r.hosts);
/** Resolves with { left }: sandboxes and volumes still on the host. */
export const drainHost = (id) => request("POST", `${hst(id)}/drain`);
export const undrainHost = (id) => request("POST", `${hst(id)}/undrain`);
/** Whether the key is an admin's: GET /v1/hosts answers it (there is no "who am I" route); other failures throw. */
export const isAdmin = () => hosts().then(() => true, (e) => (e.status === 403 ? false : Promise.reject(e)));
