/** One line per sandbox for the model: what it needs to pick the next call (id, state, how it lives). */
import type { api } from "@den/protocol";

export function describeSandbox(s: api.Sandbox): string {
  const state = s.state === "hibernated" && s.hibernate_mode ? `hibernated (${s.hibernate_mode})` : s.state;
  const parts = [`${s.id}: ${state}`, `template ${s.template}`, `${s.vcpus} vCPU`, `${s.memory_mb} MiB`];
  if (s.persistent) parts.push("persistent");
  if (s.expires_at) parts.push(`expires ${s.expires_at}`);
  const meta = Object.entries(s.metadata).map(([k, v]) => `${k}=${v}`).join(",");
  if (meta) parts.push(`metadata ${meta}`);
  if (s.operation) parts.push(`${s.operation.kind} in progress`);
  return parts.join(", ");
}
