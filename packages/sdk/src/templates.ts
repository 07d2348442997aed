/** Templates: the images sandboxes are created from. */
import { api } from "@den/protocol";
import { DenClient, type DenClientOptions, type RequestOptions, listOf } from "./client.js";
import { type TemplateInfo, toTemplateInfo } from "./types.js";

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
};
