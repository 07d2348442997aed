/** Files inside a sandbox: `sbx.filesystem`. Paths are absolute guest paths. */
import { api } from "@den/protocol";
import { toBytes, utf8 } from "./bytes.js";
import { type DenClient, type RequestOptions, seg } from "./client.js";
import { FileNotFoundError } from "./errors.js";
import { type FileInfo, type WireInput, toFileInfo } from "./types.js";

/**
 * What {@link Filesystem.list} returns.
 *
 * @example
 * ```ts
 * const { entries, truncated } = await sbx.filesystem.list("/workspace");
 * ```
 */
export interface ListFilesResult {
  entries: FileInfo[];
  /** Whether the server stopped before the end of a very large directory. */
  truncated: boolean;
}

/**
 * The files of one sandbox.
 *
 * @example
 * ```ts
 * await sbx.filesystem.write("/workspace/main.py", "print('hi')\n");
 * const r = await sbx.exec("python3 /workspace/main.py");
 * ```
 */
export class Filesystem {
  readonly #client: DenClient;
  readonly #sandboxId: string;

  /** @internal Use `sbx.filesystem`. */
  constructor(client: DenClient, sandboxId: string) {
    this.#client = client;
    this.#sandboxId = sandboxId;
  }

  #path(suffix = ""): string {
    return `/v1/sandboxes/${seg(this.#sandboxId)}/files${suffix}`;
  }

  /**
   * Reads a whole file as bytes.
   *
   * @example
   * ```ts
   * const png = await sbx.filesystem.read("/workspace/plot.png");
   * ```
   */
  async read(path: string, opts: RequestOptions = {}): Promise<Uint8Array> {
    const res = await this.#client.request({ method: "GET", path: this.#path(), query: { path }, accept: "application/octet-stream", signal: opts.signal });
    return new Uint8Array(await res.arrayBuffer());
  }

  /**
   * Reads a file as a stream of chunks, without holding it in memory (a missing file
   * throws before the stream starts).
   *
   * @example
   * ```ts
   * import { Writable } from "node:stream";
   * const stream = await sbx.filesystem.readStream("/workspace/big.tar");
   * await stream.pipeTo(Writable.toWeb(createWriteStream("big.tar")));
   * ```
   */
  async readStream(path: string, opts: RequestOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const res = await this.#client.request({ method: "GET", path: this.#path(), query: { path }, accept: "application/octet-stream", signal: opts.signal });
    return res.body ?? new ReadableStream({ start: (c) => c.close() });
  }

  /**
   * Reads a whole file as UTF-8 text.
   *
   * @example
   * ```ts
   * const pkg = JSON.parse(await sbx.filesystem.readText("/app/package.json"));
   * ```
   */
  async readText(path: string, opts: RequestOptions = {}): Promise<string> {
    return utf8(await this.read(path, opts));
  }

  /**
   * Writes a whole file (creating or replacing it): a string is written as UTF-8, bytes as is,
   * and a `ReadableStream` is streamed without holding it in memory.
   *
   * @example
   * ```ts
   * await sbx.filesystem.write("/workspace/data.bin", new Uint8Array([0, 255, 10]));
   * // Node: stream a local file
   * import { Readable } from "node:stream";
   * import { createReadStream } from "node:fs";
   * await sbx.filesystem.write("/workspace/big.tar", Readable.toWeb(createReadStream("big.tar")) as ReadableStream<Uint8Array>);
   * ```
   */
  async write(path: string, data: string | Uint8Array | ReadableStream<Uint8Array>, opts: RequestOptions = {}): Promise<FileInfo> {
    const body = typeof data === "string" || data instanceof Uint8Array ? toBytes(data) : data;
    const w = await this.#client.json(
      { method: "PUT", path: this.#path(), query: { path }, body, signal: opts.signal },
      api.FileStat.parse,
    );
    return toFileInfo(w);
  }

  /**
   * Lists a directory.
   *
   * @example
   * ```ts
   * const { entries } = await sbx.filesystem.list("/workspace");
   * for (const e of entries) console.log(e.type, e.path, e.size);
   * ```
   */
  async list(path: string, opts: RequestOptions = {}): Promise<ListFilesResult> {
    const w = await this.#client.json(
      { method: "GET", path: this.#path("/list"), query: { path }, signal: opts.signal },
      api.ListFilesResponse.parse,
    );
    return { entries: w.entries.map(toFileInfo), truncated: w.truncated };
  }

  /**
   * A path's metadata (a symlink is described, not followed).
   *
   * @example
   * ```ts
   * const { size, mtime } = await sbx.filesystem.stat("/workspace/out.csv");
   * ```
   */
  async stat(path: string, opts: RequestOptions = {}): Promise<FileInfo> {
    const w = await this.#client.json(
      { method: "GET", path: this.#path("/stat"), query: { path }, signal: opts.signal },
      api.FileStat.parse,
    );
    return toFileInfo(w);
  }

  /**
   * Whether a path exists (a `stat` that maps `file_not_found` to `false`).
   *
   * @example
   * ```ts
   * if (!(await sbx.filesystem.exists("/workspace/.venv"))) await sbx.exec("python3 -m venv /workspace/.venv");
   * ```
   */
  async exists(path: string, opts: RequestOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, opts);
      return true;
    } catch (e) {
      if (e instanceof FileNotFoundError) return false;
      throw e;
    }
  }

  /**
   * Creates a directory; with `parents`, also its missing parents (and no error if it exists).
   *
   * @example
   * ```ts
   * await sbx.filesystem.mkdir("/workspace/a/b/c", { parents: true });
   * ```
   */
  async mkdir(path: string, opts: RequestOptions & { parents?: boolean } = {}): Promise<void> {
    const body: WireInput<typeof api.MkdirRequest> = { path };
    if (opts.parents !== undefined) body.parents = opts.parents;
    await this.#client.empty({ method: "POST", path: this.#path("/mkdir"), json: body, signal: opts.signal });
  }

  /**
   * Removes a file, or with `recursive` a directory and everything in it.
   *
   * @example
   * ```ts
   * await sbx.filesystem.remove("/workspace/build", { recursive: true });
   * ```
   */
  async remove(path: string, opts: RequestOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.#client.empty({
      method: "DELETE",
      path: this.#path(),
      query: { path, recursive: opts.recursive ? true : undefined },
      signal: opts.signal,
    });
  }

  /**
   * Renames (moves) a file or directory.
   *
   * @example
   * ```ts
   * await sbx.filesystem.rename("/workspace/out.tmp", "/workspace/out.csv");
   * ```
   */
  async rename(from: string, to: string, opts: RequestOptions = {}): Promise<void> {
    const body: WireInput<typeof api.RenameRequest> = { from, to };
    await this.#client.empty({ method: "POST", path: this.#path("/rename"), json: body, signal: opts.signal });
  }
}
