/**
 * Den's build rows and log lines in E2B's shapes: states (`cancelled` is E2B's `error`), log
 * entries, a failure's reason with the E2B step it happened in, a build in a template's list,
 * and what an E2B build keeps in its row's `source` (tags, the asked shape).
 */
import { e2bApi, type e2bTemplates } from "@den/protocol";
import type { BuildRow } from "@den/control-plane";

const iso = (ms: number) => new Date(ms).toISOString();
const LEVELS = new Set(["debug", "info", "warn", "error"]);

/** The row's source as it was written (strings). */
export function sourceOf(row: BuildRow): Record<string, string> {
  try {
    return JSON.parse(row.source) as Record<string, string>;
  } catch {
    return {};
  }
}

/** The tags an E2B build carries (`source.tags`, comma-separated; a build made through /v1 has none). */
export function tagsOf(row: BuildRow): string[] {
  return (sourceOf(row).tags ?? "").split(",").filter(Boolean);
}

/** The shape an E2B build asked for (cpuCount, memoryMB), if it did. */
export function askedShape(row: BuildRow): { vcpus?: number; memoryMb?: number } {
  const s = sourceOf(row);
  return { ...(s.vcpus ? { vcpus: Number(s.vcpus) } : {}), ...(s.memory_mb ? { memoryMb: Number(s.memory_mb) } : {}) };
}

export function e2bStatus(state: string): e2bTemplates.TemplateBuildStatus {
  return state === "waiting" || state === "building" || state === "ready" ? state : "error";
}

export function logEntry(l: { at: number; level: string; message: string }): e2bTemplates.BuildLogEntry {
  return { timestamp: iso(l.at), level: (LEVELS.has(l.level) ? l.level : "info") as e2bTemplates.LogLevel, message: l.message };
}

/**
 * Why a build ended in error. `step` is E2B's numbering (1 = the first instruction, as the
 * client's stack traces count): Den's step labels (`step N/M`) less the steps Den put first;
 * `finalize` for the start or ready command.
 */
export function reasonOf(row: BuildRow): e2bTemplates.BuildStatusReason | undefined {
  if (e2bStatus(row.state) !== "error") return undefined;
  if (row.state === "cancelled" && !row.error) return { message: "the build was cancelled" };
  let err: { message?: string; details?: { step?: unknown } } = {};
  try {
    err = row.error ? JSON.parse(row.error) as typeof err : {};
  } catch {
    // keep the default message
  }
  const message = err.message ?? (row.state === "cancelled" ? "the build was cancelled" : "the build failed");
  const label = /^step (\d+)\/\d+/.exec(typeof err.details?.step === "string" ? err.details.step : message);
  const n = label ? Number(label[1]) - Number(sourceOf(row).step_offset ?? 0) : 0;
  const step = n >= 1 ? String(n) : /ready command|starting/.test(message) ? "finalize" : undefined;
  return { message, ...(step ? { step } : {}) };
}

/** A build in `GET /templates/{templateID}`; `shape` is the template's when the build asked for none. */
export function e2bBuild(row: BuildRow, shape: { vcpus: number; memoryMb: number }): e2bTemplates.TemplateBuild {
  const asked = askedShape(row);
  return {
    buildID: row.id, status: e2bStatus(row.state), createdAt: iso(row.created_at), updatedAt: iso(row.finished_at ?? row.created_at),
    ...(row.finished_at !== null ? { finishedAt: iso(row.finished_at) } : {}),
    cpuCount: asked.vcpus ?? shape.vcpus, memoryMB: asked.memoryMb ?? shape.memoryMb, envdVersion: e2bApi.ENVD_VERSION,
  };
}
