/** `filesystem.Filesystem`: stat, make, move, list and remove paths, and watch directories. */
import { posix } from "node:path";
import { DenError, e2b, mapLimit } from "@den/protocol";
import { ConnectError, parseMessage, toConnectError, type EnvelopeStream } from "./connect.js";
import { withDeadline } from "./deadline.js";
import { LinkResolver, entryOf, statEntry } from "./entry.js";
import { resolvePath } from "./request.js";
import type { RpcContext, Service } from "./rpc.js";
import { walk } from "./walk.js";
import { DirPoller, type RawEvent } from "./watchers.js";

/** Guest calls in flight at once for one listing's per-entry stats. */
const STAT_CONCURRENCY = 8;

const path = (ctx: RpcContext, p: string) => resolvePath(ctx.user, p);

async function exists(ctx: RpcContext, p: string): Promise<boolean> {
  try {
    await withDeadline(ctx.sandbox.guest.files.stat(p), `stat of ${p}`);
    return true;
  } catch (e) {
    if (e instanceof DenError && e.code === "file_not_found") return false;
    throw e;
  }
}

/** Events as envd sends them; with `includeEntry`, each with its entry when it still exists. */
async function toEvents(ctx: RpcContext, raw: RawEvent[], includeEntry: boolean): Promise<e2b.FilesystemEvent[]> {
  return mapLimit(raw, STAT_CONCURRENCY, async (r) => {
    const ev: e2b.FilesystemEvent = { name: r.name, type: r.type };
    if (includeEntry && r.type !== "EVENT_TYPE_REMOVE" && r.type !== "EVENT_TYPE_RENAME") {
      const entry = await statEntry(ctx.sandbox.guest, ctx.state, r.path).catch(() => undefined);
      if (entry) ev.entry = entry;
    }
    return ev;
  });
}

async function watchDir(ctx: RpcContext, raw: unknown, out: EnvelopeStream): Promise<void> {
  const req = parseMessage(e2b.WatchDirRequest, raw);
  let fail!: (e: unknown) => void;
  const failed = new Promise<never>((_, reject) => (fail = reject));
  failed.catch(() => undefined);
  const { release } = await ctx.state.watchers.openStream(() => new DirPoller(ctx.sandbox.guest, path(ctx, req.path), !!req.recursive, async (ev) => {
    ctx.sandbox.touch();
    for (const filesystem of await toEvents(ctx, ev, !!req.includeEntry)) await out.send({ filesystem });
  }, fail));
  let timer: NodeJS.Timeout | undefined;
  try {
    await out.send({ start: {} });
    const deadline = new Promise<"deadline">((r) => {
      if (ctx.timeoutMs) timer = setTimeout(() => r("deadline"), ctx.timeoutMs);
    });
    if ((await Promise.race([out.closed, failed, deadline])) === "deadline") out.end(new ConnectError("deadline_exceeded", "watch deadline exceeded"));
  } finally {
    clearTimeout(timer);
    release();
  }
}

export const filesystemService: Service = {
  stream: { WatchDir: { handler: watchDir, keepalive: { keepalive: {} }, holds: "watch" } },
  unary: {
    async Stat(ctx, raw): Promise<e2b.EntryResponse> {
      return { entry: await statEntry(ctx.sandbox.guest, ctx.state, path(ctx, parseMessage(e2b.StatRequest, raw).path)) };
    },
    async MakeDir(ctx, raw): Promise<e2b.EntryResponse> {
      const p = path(ctx, parseMessage(e2b.MakeDirRequest, raw).path);
      if (await exists(ctx, p)) throw new ConnectError("already_exists", `${p} already exists`);
      await withDeadline(ctx.sandbox.guest.files.mkdir(p, { parents: true, user: ctx.user }), `mkdir of ${p}`);
      return { entry: await statEntry(ctx.sandbox.guest, ctx.state, p) };
    },
    async Move(ctx, raw): Promise<e2b.EntryResponse> {
      const req = parseMessage(e2b.MoveRequest, raw);
      const from = path(ctx, req.source);
      const to = path(ctx, req.destination);
      // envd makes the destination's parents, owned by the caller.
      await withDeadline(ctx.sandbox.guest.files.mkdir(posix.dirname(to), { parents: true, user: ctx.user }), `mkdir of ${posix.dirname(to)}`);
      await withDeadline(ctx.sandbox.guest.files.rename(from, to), `rename of ${from}`);
      return { entry: await statEntry(ctx.sandbox.guest, ctx.state, to) };
    },
    async ListDir(ctx, raw): Promise<e2b.ListDirResponse> {
      const req = parseMessage(e2b.ListDirRequest, raw);
      const requested = path(ctx, req.path);
      // As envd: the path itself may be a link to the directory; the entries keep the path asked for.
      const links = new LinkResolver(ctx.sandbox.guest);
      const root = await links.resolve(requested);
      if (!root.ok) throw root.why === "loop" ? new ConnectError("failed_precondition", `cyclic symlink or chain of more than 255 links at ${requested}`) : new ConnectError("not_found", `directory not found: ${requested}`);
      if (root.stat.type !== "dir") throw new ConnectError("invalid_argument", `path is not a directory: ${requested}`);
      const found = await walk(ctx.sandbox.guest, root.path, Math.max(req.depth ?? 1, 1));
      const entries = await mapLimit(found, STAT_CONCURRENCY, async (w) => {
        const st = await links.lstat(w.path);
        if (!st) return undefined; // removed since it was listed
        return entryOf(ctx.sandbox.guest, ctx.state, posix.join(requested, w.rel), st, links);
      });
      return { entries: entries.filter((e): e is e2b.EntryInfo => e !== undefined) };
    },
    async Remove(ctx, raw) {
      const p = path(ctx, parseMessage(e2b.RemoveRequest, raw).path);
      // As envd (os.RemoveAll): a path that is not there is already removed.
      await withDeadline(ctx.sandbox.guest.files.remove(p, { recursive: true }), `remove of ${p}`).catch((e: unknown) => {
        if (!(e instanceof DenError && e.code === "file_not_found")) throw e;
      });
      return {};
    },
    async CreateWatcher(ctx, raw): Promise<e2b.CreateWatcherResponse> {
      const req = parseMessage(e2b.CreateWatcherRequest, raw);
      const root = path(ctx, req.path);
      const watcherId = await ctx.state.watchers.create(
        (onEvents, onError) => new DirPoller(ctx.sandbox.guest, root, !!req.recursive, async (ev) => onEvents(await toEvents(ctx, ev, !!req.includeEntry)), onError),
        toConnectError,
      );
      return { watcherId };
    },
    async GetWatcherEvents(ctx, raw): Promise<e2b.GetWatcherEventsResponse> {
      return { events: ctx.state.watchers.take(parseMessage(e2b.WatcherIdRequest, raw).watcherId) };
    },
    async RemoveWatcher(ctx, raw) {
      ctx.state.watchers.remove(parseMessage(e2b.WatcherIdRequest, raw).watcherId);
      return {};
    },
  },
};
