/**
 * The lifecycle tools. Each is one /v1 call through the SDK's client with the tool's input as
 * the route's body (the input schemas are those bodies plus the path's id), so what the route
 * accepts, refuses and answers is exactly what the tool does.
 */
import { api } from "@den/protocol";
import * as schemas from "../schemas.js";
import { ok } from "../result.js";
import { describeSandbox } from "./describe.js";
import { tool } from "./define.js";

const path = (id: string, suffix = "") => `/v1/sandboxes/${encodeURIComponent(id)}${suffix}`;

export const createSandbox = tool({
  name: "create_sandbox",
  description:
    "Create a sandbox: an isolated Linux microVM (Debian, root, Python 3, git, build tools) whose files, processes and memory persist across calls. " +
    "Returns its id: pass it as sandbox_id to the other tools. No network egress unless `network` allows it. Destroy it when the task is done.",
  input: schemas.CreateSandbox,
  annotations: { title: "Create a sandbox", readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  async run(args, den, extra) {
    const s = await den.client.json({ method: "POST", path: "/v1/sandboxes", json: args, signal: extra.signal }, api.Sandbox.parse);
    return ok(`created ${describeSandbox(s)}`, { sandbox: s });
  },
});

export const listSandboxes = tool({
  name: "list_sandboxes",
  description: "List your sandboxes, newest first, with their state (running, hibernated, destroyed...). Use it to find a sandbox made earlier.",
  input: schemas.ListSandboxes,
  annotations: { title: "List sandboxes", readOnlyHint: true, openWorldHint: false },
  async run(args, den, extra) {
    const query = new URLSearchParams({ limit: String(args.limit) });
    if (args.state) query.set("state", args.state);
    if (args.cursor) query.set("cursor", args.cursor);
    for (const [k, v] of Object.entries(args.metadata ?? {})) query.set(`metadata.${k}`, v);
    const page = await den.client.json({ method: "GET", path: "/v1/sandboxes", query, signal: extra.signal }, api.ListSandboxesResponse.parse);
    const lines = page.sandboxes.map(describeSandbox);
    if (!lines.length) lines.push("no sandboxes");
    if (page.next_cursor) lines.push(`more: call again with cursor ${page.next_cursor}`);
    return ok(lines.join("\n"), page);
  },
});

export const hibernateSandbox = tool({
  name: "hibernate_sandbox",
  description:
    "Hibernate a sandbox you will not use for a while, keeping its whole state (files, processes, memory). " +
    "warm: paused in place, wakes in milliseconds; cold: moved to storage, costs nothing while it waits. exec, the file tools and wake_sandbox bring it back.",
  input: schemas.Hibernate,
  annotations: { title: "Hibernate a sandbox", readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  async run({ sandbox_id, ...body }, den, extra) {
    const s = await den.client.json({ method: "POST", path: path(sandbox_id, "/hibernate"), json: body, signal: extra.signal }, api.Sandbox.parse);
    return ok(describeSandbox(s), { sandbox: s });
  },
});

export const wakeSandbox = tool({
  name: "wake_sandbox",
  description: "Wake a hibernated sandbox, with its processes and files as they were. exec and the file tools wake it by themselves; use this to have it ready ahead.",
  input: schemas.SandboxOnly,
  annotations: { title: "Wake a sandbox", readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  async run({ sandbox_id }, den, extra) {
    const s = await den.client.json({ method: "POST", path: path(sandbox_id, "/wake"), signal: extra.signal }, api.Sandbox.parse);
    return ok(describeSandbox(s), { sandbox: s });
  },
});

export const checkpointSandbox = tool({
  name: "checkpoint_sandbox",
  description:
    "Save a durable checkpoint of a sandbox's whole state (files, processes, memory): a known-good point to return to. " +
    "The sandbox keeps running. Returns a checkpoint id for restore_checkpoint.",
  input: schemas.Checkpoint,
  annotations: { title: "Checkpoint a sandbox", readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  async run({ sandbox_id, ...body }, den, extra) {
    const c = await den.client.json({ method: "POST", path: path(sandbox_id, "/checkpoints"), json: body, signal: extra.signal }, api.Checkpoint.parse);
    return ok(`checkpoint ${c.id}${c.name ? ` (${c.name})` : ""} of ${c.sandbox_id}: ${c.stored_bytes} bytes stored`, { checkpoint: c });
  },
});

export const restoreCheckpoint = tool({
  name: "restore_checkpoint",
  description: "Create a new sandbox from a checkpoint, with the files, processes and memory it had then. Returns the new sandbox's id; the original is untouched.",
  input: schemas.Restore,
  annotations: { title: "Restore a checkpoint", readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  async run({ checkpoint_id, ...body }, den, extra) {
    const s = await den.client.json({ method: "POST", path: `/v1/checkpoints/${encodeURIComponent(checkpoint_id)}/restore`, json: body, signal: extra.signal }, api.Sandbox.parse);
    return ok(`restored ${describeSandbox(s)}`, { sandbox: s });
  },
});

export const forkSandbox = tool({
  name: "fork_sandbox",
  description: "Copy a running sandbox into `count` new, independent sandboxes with its exact state (copy-on-write, fast): to try several approaches side by side. Returns their ids.",
  input: schemas.Fork,
  annotations: { title: "Fork a sandbox", readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  async run({ sandbox_id, ...body }, den, extra) {
    const r = await den.client.json({ method: "POST", path: path(sandbox_id, "/fork"), json: body, signal: extra.signal }, api.ForkResponse.parse);
    return ok(`forked ${sandbox_id} into:\n${r.sandboxes.map(describeSandbox).join("\n")}`, r);
  },
});

export const destroySandbox = tool({
  name: "destroy_sandbox",
  description: "Destroy a sandbox and everything in it, for good (its checkpoints are kept). Use it when the task is done.",
  input: schemas.SandboxOnly,
  annotations: { title: "Destroy a sandbox", readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
  async run({ sandbox_id }, den, extra) {
    const s = await den.client.json({ method: "DELETE", path: path(sandbox_id), signal: extra.signal }, api.Sandbox.parse);
    return ok(describeSandbox(s), { sandbox: s });
  },
});

export const getPortUrl = tool({
  name: "get_port_url",
  description:
    "Get a URL to a server listening on a port inside a sandbox (a dev server, a notebook), to open in a browser or fetch. " +
    "Anyone holding the URL reaches that port until it expires; a request to it wakes a hibernated sandbox.",
  input: schemas.PortUrl,
  annotations: { title: "URL of a sandbox's port", readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  async run({ sandbox_id, ...body }, den, extra) {
    const u = await den.client.json({ method: "POST", path: path(sandbox_id, "/urls"), json: body, signal: extra.signal }, api.PortUrl.parse);
    return ok(`${u.url}\n(port ${u.port}, expires ${u.expires_at}; also at ${u.path_url})`, u);
  },
});
