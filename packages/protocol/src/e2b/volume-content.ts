/**
 * E2B's volume content API as the `e2b` client's `Volume` class (2.51) calls it:
 * `/volumecontent/{volumeID}/{dir,path,file}` with `Authorization: Bearer <token of that
 * volume>` (from `VolumeAndToken`). Names are E2B's (the client's generated OpenAPI types);
 * E2B-API.md says what Den does with each. Query values arrive as strings.
 */
import { z } from "zod";

export const FileType = z.enum(["unknown", "file", "directory", "symlink"]);
export type FileType = z.infer<typeof FileType>;

/** One entry. Den's guest reports one time: `atime` and `ctime` are its `mtime`. `mode` is the permission bits. */
export const EntryStat = z.object({
  name: z.string(),
  /** From the volume's root. */
  path: z.string(),
  type: FileType,
  size: z.number().int(),
  mode: z.number().int(),
  uid: z.number().int(),
  gid: z.number().int(),
  atime: z.string(),
  mtime: z.string(),
  ctime: z.string(),
  target: z.string().optional(),
});
export type EntryStat = z.infer<typeof EntryStat>;

/** Errors of the content API: `code` is a string here (Den's error code), unlike the control API's number. */
export const ErrorBody = z.object({ code: z.string(), message: z.string() });
export type ErrorBody = z.infer<typeof ErrorBody>;

/** How deep one listing goes, whatever is asked. */
export const MAX_DEPTH = 32;

const Path = z.string().min(1).max(4096);
const Flag = z.enum(["true", "false"]).transform((v) => v === "true");
const Id = z.coerce.number().int().min(0).max(2 ** 32 - 1);
const Mode = z.coerce.number().int().min(0).max(0o7777);

export const PathQuery = z.object({ path: Path });
export const ListQuery = z.object({ path: Path, depth: z.coerce.number().int().min(1).max(MAX_DEPTH).optional() });
/** `makeDir` and `writeFile`: `force` makes missing parents for makeDir (a write always makes them). */
export const CreateQuery = z.object({ path: Path, uid: Id.optional(), gid: Id.optional(), mode: Mode.optional(), force: Flag.optional() });
export type CreateQuery = z.infer<typeof CreateQuery>;
/** `updateMetadata`'s body (`PATCH .../path`). */
export const MetadataPatch = z.object({ uid: Id.optional(), gid: Id.optional(), mode: Mode.optional() });
export type MetadataPatch = z.infer<typeof MetadataPatch>;
