/**
 * Build contexts: the tars a build's COPY steps take files from, uploaded by their owner and
 * kept in the object store under `<deployment>/contexts/<owner>/<name>` (an owner sees only
 * their own: the name of another's is no oracle). A context is named by its sha256, or by the
 * name a client chose (E2B's files hash); either way the bytes' own sha256 is recorded beside
 * it, and the host checks it before it reads a byte as a tar. Unused contexts go after
 * DEN_BUILD_CONTEXT_DAYS (default 7).
 */
import { createHash } from "node:crypto";
import { Transform, type Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenError } from "@den/protocol";
import type { Ctx } from "./context.js";

const NAME = /^[0-9a-f]{64}$/;
const DIGEST = /^sha256:([0-9a-f]{64})$/;

/** A context's place in the store (owners by a hash of their id: ids are not keys). */
function prefix(ctx: Ctx, owner: string): string {
  return `${ctx.deployment}/contexts/${createHash("sha256").update(owner).digest("hex").slice(0, 32)}`;
}

/** `sha256:<hex>` (or a client's 64-hex name) -> the name the store keeps it under. */
export function contextName(digestOrName: string): string {
  const m = DIGEST.exec(digestOrName);
  const name = m ? m[1]! : digestOrName;
  if (!NAME.test(name)) throw new DenError("invalid_argument", `a build context is named sha256:<64 hex digits>, got ${JSON.stringify(digestOrName.slice(0, 80))}`);
  return name;
}

/**
 * Stores an upload as the owner's context `name`, counting and hashing it on the way; over
 * `maxBytes` it is refused (413). When `expectDigest` (the name is the digest), bytes that hash
 * otherwise are refused and removed. Returns the bytes' sha256 and size.
 */
export async function putContext(ctx: Ctx, owner: string, name: string, body: Readable, maxBytes: number, expectDigest: boolean): Promise<{ sha256: string; size: number }> {
  await withinStoredBytes(ctx, owner);
  const key = `${prefix(ctx, owner)}/${name}`;
  const hash = createHash("sha256");
  let size = 0;
  const meter = new Transform({
    transform(chunk: Buffer, _e, cb) {
      size += chunk.length;
      if (size > maxBytes) return cb(new DenError("payload_too_large", `a build context may be at most ${maxBytes} bytes (DEN_MAX_CONTEXT_MB)`));
      hash.update(chunk);
      cb(null, chunk);
    },
  });
  const upload = ctx.objects.putStream(key, meter);
  try {
    await Promise.all([pipeline(body, meter), upload]);
  } catch (e) {
    await ctx.objects.delete(key).catch(() => undefined);
    throw e;
  }
  const sha256 = hash.digest("hex");
  if (expectDigest && sha256 !== name) {
    await ctx.objects.delete(key).catch(() => undefined);
    throw new DenError("invalid_argument", `the uploaded context's sha256 is ${sha256}, not the ${name} it was named`);
  }
  // Its digest beside it: a context named by a client is checked against this one.
  await ctx.objects.putBytes(`${key}.sha256`, Buffer.from(sha256));
  return { sha256, size };
}

/** An owner at the stored-bytes quota builds nothing more and uploads no context (a build adds to what is stored). */
export async function withinStoredBytes(ctx: Ctx, owner: string): Promise<void> {
  const max = ctx.config.limits.storedBytesPerOwner;
  const used = await ctx.store.snapshots.storedBytes(owner);
  if (used >= max) {
    throw new DenError("quota_exceeded", `owner ${owner} keeps ${used} bytes in the snapshot store, the quota is ${max}; delete checkpoints or destroy hibernated sandboxes before a template build`, { stored_bytes: used, quota_bytes: max });
  }
}

/** Whether the owner has context `name` (E2B's `present`). */
export async function hasContext(ctx: Ctx, owner: string, name: string): Promise<boolean> {
  return (await ctx.objects.head(`${prefix(ctx, owner)}/${name}.sha256`)) !== undefined;
}

/** Where a build's COPY finds the owner's context, and the digest its bytes must have. */
export async function contextRef(ctx: Ctx, owner: string, digestOrName: string): Promise<{ key: string; sha256: string }> {
  const name = contextName(digestOrName);
  const key = `${prefix(ctx, owner)}/${name}`;
  const digest = await ctx.objects.getBytes(`${key}.sha256`).catch(() => undefined);
  if (!digest) throw new DenError("not_found", `build context ${digestOrName.slice(0, 80)} was not uploaded (PUT /v1/templates/contexts/sha256:<digest>)`);
  return { key, sha256: digest.toString("utf8") };
}

/** Removes contexts not uploaded again for `maxAgeMs` (a build that needs one uploads it again). */
export async function collectContexts(ctx: Ctx, maxAgeMs: number): Promise<number> {
  let n = 0;
  for (const o of await ctx.objects.list(`${ctx.deployment}/contexts/`)) {
    if (ctx.clock.now() - o.modifiedAt <= maxAgeMs) continue;
    await ctx.objects.delete(o.key);
    n++;
  }
  return n;
}

/** The owner-scoped context calls, bound to one control plane (for the surfaces that take uploads). */
export interface BuildContexts {
  put(owner: string, name: string, body: Readable, maxBytes: number, expectDigest: boolean): Promise<{ sha256: string; size: number }>;
  has(owner: string, name: string): Promise<boolean>;
  ref(owner: string, digestOrName: string): Promise<{ key: string; sha256: string }>;
}

export function buildContexts(ctx: Ctx): BuildContexts {
  return {
    put: (owner, name, body, maxBytes, expectDigest) => putContext(ctx, owner, name, body, maxBytes, expectDigest),
    has: (owner, name) => hasContext(ctx, owner, name),
    ref: (owner, name) => contextRef(ctx, owner, name),
  };
}
