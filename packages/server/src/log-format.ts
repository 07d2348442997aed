/**
 * Logs a person can read: pino's JSON lines turned into one line per event
 * (`12:01:02.345 INFO  sandbox sbx_... hibernated  sandbox=sbx_... op=op_... req=req-1`), for
 * a terminal. Anything else (a file, journald, a log shipper) keeps the JSON lines.
 */
import { Writable } from "node:stream";

const LEVELS: Record<number, string> = { 10: "TRACE", 20: "DEBUG", 30: "INFO ", 40: "WARN ", 50: "ERROR", 60: "FATAL" };
/** Colors by level, where the terminal has them. */
const COLORS: Record<number, string> = { 10: "90", 20: "90", 30: "32", 40: "33", 50: "31", 60: "35" };
/** Fields every line has or that are said another way. */
const OMIT = new Set(["level", "time", "pid", "hostname", "msg", "v", "err", "reqId", "sandbox", "op"]);
/** At most this much of one value is printed (a field holding a whole output is cut). */
const MAX_VALUE = 200;

function value(v: unknown): string {
  const s = typeof v === "string" ? (/^[\w.:/@+-]*$/.test(v) && v !== "" ? v : JSON.stringify(v)) : JSON.stringify(v) ?? String(v);
  return s.length > MAX_VALUE ? `${s.slice(0, MAX_VALUE)}...` : s;
}

/** One JSON log line as a readable one (a line that is not JSON passes as it is). */
export function formatLogLine(json: string, color = false): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const level = typeof o.level === "number" ? o.level : 30;
  const t = new Date(typeof o.time === "number" ? o.time : Date.now());
  const time = `${String(t.getHours()).padStart(2, "0")}:${String(t.getMinutes()).padStart(2, "0")}:${String(t.getSeconds()).padStart(2, "0")}.${String(t.getMilliseconds()).padStart(3, "0")}`;
  const name = LEVELS[level] ?? String(level);
  const tag = color ? `\x1b[${COLORS[level] ?? "0"}m${name}\x1b[0m` : name;
  // The ids that tie lines together come first, always by the same names.
  const ids = [["sandbox", o.sandbox], ["op", o.op], ["req", o.reqId]].filter(([, v]) => v !== undefined).map(([k, v]) => `${k}=${value(v)}`);
  const rest = Object.entries(o).filter(([k]) => !OMIT.has(k)).map(([k, v]) => `${k}=${value(v)}`);
  let line = `${time} ${tag} ${String(o.msg ?? "")}${[...ids, ...rest].length ? `  ${[...ids, ...rest].join(" ")}` : ""}`;
  const err = o.err as { type?: string; message?: string; stack?: string; code?: string } | undefined;
  if (err) line += `\n    ${err.type ?? "Error"}${err.code ? ` (${err.code})` : ""}: ${err.message ?? ""}${level >= 50 && err.stack ? err.stack.split("\n").slice(1, 8).map((l) => `\n      ${l.trim()}`).join("") : ""}`;
  return line;
}

/** A destination for pino: writes each JSON line to `out` as a readable line. */
export function readableLogStream(out: NodeJS.WritableStream & { isTTY?: boolean; hasColors?: () => boolean } = process.stdout): Writable {
  const color = Boolean(out.isTTY && out.hasColors?.());
  let partial = "";
  return new Writable({
    write(chunk: Buffer | string, _enc, done) {
      const lines = (partial + chunk.toString()).split("\n");
      partial = lines.pop() ?? "";
      for (const l of lines) if (l) out.write(`${formatLogLine(l, color)}\n`);
      done();
    },
    final(done) {
      if (partial) out.write(`${formatLogLine(partial, color)}\n`);
      done();
    },
  });
}

/** How `den serve` logs: readable on a terminal, JSON lines otherwise; `DEN_LOG_FORMAT` (or `--log-format`) `json|pretty` decides instead. */
export function logFormat(flag: string | undefined, env: NodeJS.ProcessEnv = process.env, tty = Boolean(process.stdout.isTTY)): "json" | "pretty" {
  const f = flag ?? env.DEN_LOG_FORMAT;
  if (f === "json" || f === "pretty") return f;
  if (f !== undefined && f !== "") throw new Error(`log format must be json or pretty, not ${JSON.stringify(f)}`);
  return tty ? "pretty" : "json";
}
