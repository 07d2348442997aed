// Formatting of times, durations, sizes and numbers.

/** 3d 4h, 2h 05m, 4m 12s, 12s */
export function duration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${String(m).padStart(2, "0")}m`;
  if (m) return `${m}m ${String(sec).padStart(2, "0")}s`;
  return `${sec}s`;
}

/** Seconds as metered (fractions kept under a minute). */
export function seconds(x) {
  if (!x) return "0s";
  if (x < 10) return `${x.toFixed(1)}s`;
  return duration(x * 1000);
}

export const since = (iso, now = Date.now()) => duration(now - Date.parse(iso));

/** Time left until `iso`: null means no deadline. */
export function countdown(iso, now = Date.now()) {
  if (!iso) return { text: "none", left: Infinity };
  const left = Date.parse(iso) - now;
  return { text: left <= 0 ? "expired" : duration(left), left };
}

/** "in 18 h", "in 5 min", "3 d ago": how far `iso` is from now, in its largest whole unit (hours up to two days). */
export function relative(iso, now = Date.now()) {
  const ms = Date.parse(iso) - now;
  const s = Math.floor(Math.abs(ms) / 1000);
  const text = s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min` : s < 2 * 86400 ? `${Math.floor(s / 3600)} h` : `${Math.floor(s / 86400)} d`;
  return ms >= 0 ? `in ${text}` : `${text} ago`;
}

const dtf = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
const tf = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });

export const dateTime = (iso) => (iso ? dtf.format(new Date(iso)) : "—");
export const clock = (iso) => tf.format(new Date(iso));
const sdf = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
/** The time alone today, else a short date. */
export const shortDateTime = (iso) => (new Date(iso).toDateString() === new Date().toDateString() ? clock(iso) : sdf.format(new Date(iso)));

export function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n, i = 0;
  while (v >= 1024 && i < units.length - 1) (v /= 1024), i++;
  return `${v >= 100 || i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}

export const mib = (n) => bytes(n * 1024 * 1024);

/** Small amounts of money keep four significant digits. */
export function money(x) {
  if (!x) return "0";
  return x >= 1 ? x.toFixed(2) : x.toPrecision(4).replace(/0+$/, "");
}

export const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
