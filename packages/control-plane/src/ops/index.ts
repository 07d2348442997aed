import type { api } from "@den/protocol";
import { checkpoint } from "./checkpoint.js";
import { checkpointDelete } from "./checkpoint-delete.js";
import type { DetachedOp, SandboxOp } from "./common.js";
import { create } from "./create.js";
import { destroy } from "./destroy.js";
import { fork } from "./fork.js";
import { hibernate } from "./hibernate.js";
import { recover } from "./recover.js";
import { restore } from "./restore.js";
import { setNetwork } from "./set-network.js";
import { setTimeout } from "./set-timeout.js";
import { templateBuild } from "./template-build.js";
import { templateDelete } from "./template-delete.js";
import { wake } from "./wake.js";

/** Every kind of operation on a sandbox, by kind: recovery settles one through `sandboxOps[kind].settle`. */
export const sandboxOps = {
  create, restore, destroy, hibernate, wake, recover, checkpoint, checkpoint_delete: checkpointDelete, fork,
  set_network: setNetwork, set_timeout: setTimeout,
} satisfies Record<Exclude<api.OperationKind, "template_build" | "template_delete">, SandboxOp>;

/** The kinds on no sandbox (a template's). */
export const detachedOps = { template_build: templateBuild, template_delete: templateDelete } satisfies Record<"template_build" | "template_delete", DetachedOp>;

export { argsOf, opArgs, type OpArgs } from "./args.js";
export type { DetachedOp, OpDeps, SandboxOp, Settling } from "./common.js";
