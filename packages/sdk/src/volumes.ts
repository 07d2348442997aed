/** Volumes: named per-owner filesystems that outlive every sandbox that mounts them. */
import { api } from "@den/protocol";
import { toBytes, utf8 } from "./bytes.js";
import { DenClient, type DenClientOptions, type RequestOptions, listOf, seg } from "./client.js";
import { type FileInfo, type VolumeInfo, toFileInfo, toVolumeInfo } from "./types.js";

/**
 * Options of {@link Volumes.create}.
 *
 * @example
 * ```ts
 * const opts: CreateVolumeOptions = { name: "work", sizeMb: 2048 };
 * ```
 */
export interface CreateVolumeOptions extends DenClientOptions, RequestOptions {
  /** 1 to 63 lowercase letters, digits and `-` (unique among the owner's volumes). */
  name: string;
  /** The filesystem's size in MiB (16 to 1 TiB; host disk is taken only as it is written). */
  sizeMb: number;
}

/**
 * The caller's volumes. A volume is mounted with `volumes: [{ name, path, readOnly? }]` on
 * {@link Sandbox.create}, {@link Sandbox.restore} and `sbx.fork()`; it is held by one
 * read-write mount or any number of read-only ones. A warm hibernation keeps it held; a cold
 * one lets go of it (unless a process keeps files open on it) and the wake mounts it again.
 * It is not part of a checkpoint. Its files can be read and written without a sandbox.
 *
 * @example
 * ```ts
 * await Volumes.create({ name: "work", sizeMb: 1024 });
 * await Volumes.writeFile("work", "/input.txt", "hello\n");
 * await using sbx = await Sandbox.create({ volumes: [{ name: "work", path: "/work" }] });
 * await sbx.exec("wc -c /work/input.txt > /work/out.txt");
 * await sbx.destroy();
 * console.log(await Volumes.readText("work", "/out.txt"));
 * ```
 */
export const Volumes = {
  /**
   * Creates an empty volume. {@link ConflictError} `already_exists` for a name the owner has;
   * {@link QuotaExceededError} past the owner's volume count or size quota.
   *
   * @example
   * ```ts
   * const v = await Volumes.create({ name: "datasets", sizeMb: 10_240 });
   * ```
   */
  async create(opts: CreateVolumeOptions): Promise<VolumeInfo> {
    const client = new DenClient(opts);
    const body: api.CreateVolumeRequest = { name: opts.name, size_mb: opts.sizeMb };
    return toVolumeInfo(await client.json({ method: "POST", path: "/v1/volumes", json: body, signal: opts.signal }, api.Volume.parse));
  },

  /**
   * The owner's volumes, by name, each with the sandboxes it is mounted in.
   *
   * @example
   * ```ts
   * for (const v of await Volumes.list()) console.log(v.name, v.sizeMb, v.mounts.length);
   * ```
   */
  async list(opts: DenClientOptions & RequestOptions = {}): Promise<VolumeInfo[]> {
    const client = new DenClient(opts);
    return (await client.json({ method: "GET", path: "/v1/volumes", signal: opts.signal }, listOf("volumes", api.Volume.parse))).map(toVolumeInfo);
  },

  /**
   * One volume; {@link NotFoundError} (`volume_not_found`) if the owner has none of that name.
   *
   * @example
   * ```ts
   * const { sizeMb, mounts } = await Volumes.get("work");
   * ```
   */
  async get(name: string, opts: DenClientOptions & RequestOptions = {}): Promise<VolumeInfo> {
    const client = new DenClient(opts);
    return toVolumeInfo(await client.json({ method: "GET", path: `/v1/volumes/${seg(name)}`, signal: opts.signal }, api.Volume.parse));
  },

  /**
   * Deletes a volume and its data; {@link ConflictError} (`volume_in_use`) while any sandbox
   * that is not destroyed mounts it (hibernated ones too).
   *
   * @example
   * ```ts
   * await Volumes.delete("scratch");
   * ```
   */
  async delete(name: string, opts: DenClientOptions & RequestOptions = {}): Promise<void> {
    const client = new DenClient(opts);
    await client.empty({ method: "DELETE", path: `/v1/volumes/${seg(name)}`, signal: opts.signal });
  },

  /**
   * Grows a volume's filesystem to `sizeMb` (never shrinks); {@link ConflictError}
   * (`volume_in_use`) while a sandbox holds it.
   *
   * @example
   * ```ts
   * const v = await Volumes.grow("work", 4096);
   * ```
   */
  async grow(name: string, sizeMb: number, opts: DenClientOptions & RequestOptions = {}): Promise<VolumeInfo> {
    const client = new DenClient(opts);
    const body: api.GrowVolumeRequest = { size_mb: sizeMb };
    return toVolumeInfo(await client.json({ method: "POST", path: `/v1/volumes/${seg(name)}/grow`, json: body, signal: opts.signal }, api.Volume.parse));
  },

  /**
   * Writes a file into a volume without a sandbox (a string as UTF-8, bytes as they are, a
   * `ReadableStream` streamed); `path` is from the volume's root, parents are made.
   * {@link ConflictError} (`volume_in_use`) while a sandbox holds the volume.
   *
   * @example
   * ```ts
   * await Volumes.writeFile("work", "/config/settings.json", JSON.stringify({ debug: true }));
   * ```
   */
  async writeFile(name: string, path: string, data: string | Uint8Array | ReadableStream<Uint8Array>, opts: DenClientOptions & RequestOptions = {}): Promise<FileInfo> {
    const client = new DenClient(opts);
    const body = typeof data === "string" || data instanceof Uint8Array ? toBytes(data) : data;
    return toFileInfo(await client.json({ method: "PUT", path: `/v1/volumes/${seg(name)}/files`, query: { path }, body, signal: opts.signal }, api.FileStat.parse));
  },

  /**
   * Reads a file of a volume without a sandbox, as a stream (a missing file throws before
   * it starts); {@link ConflictError} (`volume_in_use`) while a sandbox holds it read-write.
   *
   * @example
   * ```ts
   * const stream = await Volumes.readStream("work", "/results.tar");
   * ```
   */
  async readStream(name: string, path: string, opts: DenClientOptions & RequestOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const client = new DenClient(opts);
    const res = await client.request({ method: "GET", path: `/v1/volumes/${seg(name)}/files`, query: { path }, accept: "application/octet-stream", signal: opts.signal });
    return res.body ?? new ReadableStream({ start: (c) => c.close() });
  },

  /**
   * Reads a whole file of a volume as bytes.
   *
   * @example
   * ```ts
   * const db = await Volumes.readFile("work", "/app.sqlite");
   * ```
   */
  async readFile(name: string, path: string, opts: DenClientOptions & RequestOptions = {}): Promise<Uint8Array> {
    const client = new DenClient(opts);
    const res = await client.request({ method: "GET", path: `/v1/volumes/${seg(name)}/files`, query: { path }, accept: "application/octet-stream", signal: opts.signal });
    return new Uint8Array(await res.arrayBuffer());
  },

  /**
   * Reads a whole file of a volume as UTF-8 text.
   *
   * @example
   * ```ts
   * const log = await Volumes.readText("work", "/run.log");
   * ```
   */
  async readText(name: string, path: string, opts: DenClientOptions & RequestOptions = {}): Promise<string> {
    return utf8(await Volumes.readFile(name, path, opts));
  },
};
