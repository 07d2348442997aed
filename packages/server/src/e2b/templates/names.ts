/**
 * E2B's template names as Den's: `name[:tag]`, where the name is a Den template name as is
 * (templateID = alias = name: Den has one namespace) and the tag one of the build's labels.
 * A name Den cannot hold (capitals, a `team/` namespace, dots) is refused with the rule,
 * not rewritten: the name a build gets must be the one `Sandbox.create` is later given.
 */
import { DenError } from "@den/protocol";

const NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const TAG = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** The tag a build carries when none is asked for (E2B's). */
export const DEFAULT_TAG = "default";

export function isDenName(name: string): boolean {
  return NAME.test(name);
}

/** `name` or `name:tag`, checked. */
export function parseName(raw: string): { name: string; tag?: string } {
  const i = raw.indexOf(":");
  const name = i < 0 ? raw : raw.slice(0, i);
  if (!NAME.test(name)) {
    throw new DenError("invalid_argument", `template name ${JSON.stringify(name.slice(0, 80))}: Den's template names are 1-63 lowercase letters, digits, _ and -, starting with a letter or digit (no team/ namespace, no dots)`);
  }
  if (i < 0) return { name };
  return { name, tag: checkTag(raw.slice(i + 1)) };
}

export function checkTag(tag: string): string {
  if (!TAG.test(tag)) throw new DenError("invalid_argument", `tag ${JSON.stringify(tag.slice(0, 80))}: a tag is 1-128 letters, digits, ., _ and -, starting with a letter or digit`);
  return tag;
}

/** A templateID in a path that names a template, never a tag of it. */
export function plainName(raw: string): string {
  const { name, tag } = parseName(raw);
  if (tag !== undefined) throw new DenError("invalid_argument", `${JSON.stringify(raw.slice(0, 80))}: name the template without a tag here`);
  return name;
}
