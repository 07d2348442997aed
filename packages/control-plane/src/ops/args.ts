import { z } from "zod";
import { api } from "@den/protocol";

/**
 * What each kind of operation is begun with (its row's `args`, JSON): written with the
 * intent, read back by the crash path. Loose objects: a row written by an earlier version
 * keeps what this one does not read. Every kind's module (ops/<kind>.ts) exports its own.
 */
const id = z.string().min(1).max(128);

export const createArgs = z.looseObject({ template: z.string(), vcpus: z.number().optional(), memoryMb: z.number().optional(), diskMb: z.number().optional() });
export const restoreArgs = z.looseObject({ checkpoint: id });
export const destroyArgs = z.looseObject({ lost: z.boolean().optional(), host: z.string().nullable().optional() });
export const hibernateArgs = z.discriminatedUnion("mode", [
  z.looseObject({ mode: z.literal("warm"), snapshot: id }),
  z.looseObject({ mode: z.literal("disk"), from_warm: id.nullable().optional() }),
  z.looseObject({ mode: z.literal("cold"), snapshot: id, key: z.string().min(1), from_warm: id.nullable().optional() }),
]);
export const wakeArgs = z.looseObject({ mode: z.enum(["warm", "cold", "disk"]), snapshot: id.nullable(), host: z.string().optional(), held_volumes: z.array(id).optional() });
export const recoverArgs = z.looseObject({ checkpoint: id, host: z.string().optional() });
export const checkpointArgs = z.looseObject({ checkpoint: id, key: z.string().optional(), name: z.string().nullable().optional() });
export const checkpointDeleteArgs = z.looseObject({ checkpoint: id });
export const forkArgs = z.looseObject({ children: z.array(id), via: id.optional() });
export const setNetworkArgs = z.looseObject({ policy: api.NetworkPolicy });
export const setTimeoutArgs = z.looseObject({ seconds: z.number(), extend_only: z.boolean().optional() });
export const templateBuildArgs = z.looseObject({ name: z.string(), previous: z.object({ deleted_at: z.number().nullable() }).nullable() });
export const templateDeleteArgs = z.looseObject({ name: z.string() });

/** Each kind's schema, by kind. */
export const opArgs = {
  create: createArgs, restore: restoreArgs, destroy: destroyArgs, hibernate: hibernateArgs, wake: wakeArgs, recover: recoverArgs,
  checkpoint: checkpointArgs, checkpoint_delete: checkpointDeleteArgs, fork: forkArgs, set_network: setNetworkArgs,
  set_timeout: setTimeoutArgs, template_build: templateBuildArgs, template_delete: templateDeleteArgs,
} satisfies Record<api.OperationKind, z.ZodType>;

/** What an operation of kind `K` is begun with. */
export type OpArgs<K extends api.OperationKind> = z.input<(typeof opArgs)[K]>;

/** The arguments an operation row was begun with, checked against its kind's schema (a row that does not fit is an error, not a guess). */
export function argsOf<K extends api.OperationKind>(op: { kind: string; args: string; id: string }, kind: K): z.output<(typeof opArgs)[K]> {
  if (op.kind !== kind) throw new Error(`operation ${op.id} is a ${op.kind}, not a ${kind}`);
  const parsed = opArgs[kind].safeParse(JSON.parse(op.args));
  if (!parsed.success) throw new Error(`operation ${op.id} (${kind}) has arguments this version cannot read: ${parsed.error.message}`);
  return parsed.data as z.output<(typeof opArgs)[K]>;
}
