/** Templates: the images sandboxes are created from. */
import { api } from "@den/protocol";
import { DenClient, type DenClientOptions, type RequestOptions, listOf, seg } from "./client.js";
import { type TemplateInfo, type WireInput, toTemplateInfo } from "./types.js";

/** What {@link Templates.create} builds from, and how. */
export interface CreateTemplateSpec {
  name: string;
  /** Start from this template (default `base`)... */
  fromTemplate?: string;
  /** ...or from a checkpoint's exact state... */
  fromCheckpoint?: string;
  /** ...or from an OCI image: `python:3.12`, `registry:5000/repo@sha256:...`, with credentials for a private one. */
  fromImage?: string | { ref: string; credentials?: { username: string; password: string } | { token: string } };
  /** Shell commands run in order in the building sandbox; each must exit 0. */
  setup?: string[];
  setupTimeoutSeconds?: number;
  /** Image builds: a command kept running in every sandbox (default: the image's ENTRYPOINT + CMD). */
  startCmd?: string;
  /** Image builds: run until it exits 0, then the template is baked (e.g. `curl -fs localhost:8080`). */
  readyCmd?: string;
  readyTimeoutSeconds?: number;
  vcpus?: number;
  memoryMb?: number;
  diskMb?: number;
  /** Build again even if the same content was built before. */
  force?: boolean;
}

/**
 * The templates available to `Sandbox.create({ template })`.
 *
 * @example
 * ```ts
 * for (const t of await Templates.list()) console.log(`${t.name}@${t.version}`, t.current ? "(current)" : "");
 * ```
 */
export const Templates = {
  /**
   * Every template version on the server.
   *
   * @example
   * ```ts
   * const names = [...new Set((await Templates.list()).map((t) => t.name))];
   * ```
   */
  async list(opts: DenClientOptions & RequestOptions = {}): Promise<TemplateInfo[]> {
    const client = new DenClient(opts);
    const list = await client.json({ method: "GET", path: "/v1/templates", signal: opts.signal }, listOf("templates", api.Template.parse));
    return list.map(toTemplateInfo);
  },

  /**
   * Builds a template: a sandbox from `fromTemplate` (default `base`) or from a checkpoint
   * runs the `setup` commands in order (each must exit 0; no network), then its memory and
   * disk are captured. Sandboxes created from the template start in that state, processes
   * included, as fast as from `base`. The same recipe again returns the version built before.
   *
   * @example
   * ```ts
   * const t = await Templates.create({
   *   name: "myproject",
   *   setup: ["mkdir -p /workspace/app && cd /workspace/app && git init -q", "echo 'print(42)' > /workspace/app/main.py"],
   * });
   * const sbx = await Sandbox.create({ template: t.name });
   * // Or from an image in a registry, its server started and baked warm:
   * await Templates.create({ name: "web", fromImage: "registry.example:5000/web:1", readyCmd: "curl -fs localhost:8080" });
   * ```
   */
  async create(spec: CreateTemplateSpec, opts: DenClientOptions & RequestOptions = {}): Promise<TemplateInfo> {
    const client = new DenClient(opts);
    const body: WireInput<typeof api.CreateTemplateRequest> = { name: spec.name };
    if (spec.fromTemplate !== undefined) body.from_template = spec.fromTemplate;
    if (spec.fromCheckpoint !== undefined) body.from_checkpoint = spec.fromCheckpoint;
    if (spec.fromImage !== undefined) body.from_image = spec.fromImage;
    if (spec.setup !== undefined) body.setup = spec.setup;
    if (spec.setupTimeoutSeconds !== undefined) body.setup_timeout_seconds = spec.setupTimeoutSeconds;
    if (spec.startCmd !== undefined) body.start_cmd = spec.startCmd;
    if (spec.readyCmd !== undefined) body.ready_cmd = spec.readyCmd;
    if (spec.readyTimeoutSeconds !== undefined) body.ready_timeout_seconds = spec.readyTimeoutSeconds;
    if (spec.vcpus !== undefined) body.vcpus = spec.vcpus;
    if (spec.memoryMb !== undefined) body.memory_mb = spec.memoryMb;
    if (spec.diskMb !== undefined) body.disk_mb = spec.diskMb;
    if (spec.force !== undefined) body.force = spec.force;
    return toTemplateInfo(await client.json({ method: "POST", path: "/v1/templates", json: body, signal: opts.signal }, api.Template.parse));
  },

  /**
   * Deletes a template you built; sandboxes and checkpoints made from it keep working.
   *
   * @example
   * ```ts
   * await Templates.delete("myproject");
   * ```
   */
  async delete(name: string, opts: DenClientOptions & RequestOptions = {}): Promise<void> {
    const client = new DenClient(opts);
    await client.request({ method: "DELETE", path: `/v1/templates/${seg(name)}`, signal: opts.signal });
  },
};
