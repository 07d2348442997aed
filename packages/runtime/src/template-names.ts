import { DenError } from "@den/protocol";

/** A template's name: one path component under `templates/` (no leading dot, so never `..`). */
export const TEMPLATE_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
/** A template's version: 12 hex digits (the start of the sha256 of what it is made of). */
export const TEMPLATE_VERSION = /^[0-9a-f]{12}$/;

export function checkTemplateName(name: string): void {
  if (typeof name !== "string" || !TEMPLATE_NAME.test(name)) throw new DenError("invalid_argument", `template name must match ${TEMPLATE_NAME}, got ${JSON.stringify(String(name).slice(0, 100))}`);
}

/** Whether `ref` names a template version a path may be made of. */
export function isTemplateRef(ref: unknown): ref is { name: string; version: string } {
  const r = ref as { name?: unknown; version?: unknown } | null;
  return typeof r === "object" && r !== null && typeof r.name === "string" && TEMPLATE_NAME.test(r.name) && typeof r.version === "string" && TEMPLATE_VERSION.test(r.version);
}
