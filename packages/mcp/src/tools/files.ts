/** The file tools: read (bounded, text or base64), write (whole file), list a directory; through the SDK's Filesystem. */
import { DenError } from "@den/protocol";
import { ok } from "../result.js";
import * as schemas from "../schemas.js";
import { tool } from "./define.js";

/** Standard base64 (whitespace allowed, as in wrapped output): anything else is the caller's mistake, not silently dropped bytes. */
const BASE64 = /^[A-Za-z0-9+/\s]*={0,2}\s*$/;

export const readFile = tool({
  name: "read_file",
  description: "Read a file in a sandbox: text (utf8, the default) or base64 for binary files. Returns at most max_bytes from its start, marked truncated when the file is longer.",
  input: schemas.ReadFile,
  annotations: { title: "Read a file", readOnlyHint: true, openWorldHint: false },
  async run(args, den, extra) {
    const sbx = await den.sandbox(args.sandbox_id, extra.signal);
    const stream = await sbx.filesystem.readStream(args.path, { signal: extra.signal });
    const parts: Uint8Array[] = [];
    let got = 0;
    let truncated = false;
    const reader = stream.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const room = args.max_bytes - got;
        parts.push(value.subarray(0, room));
        got += Math.min(value.length, room);
        if (value.length > room) {
          truncated = true;
          break;
        }
      }
    } finally {
      // Stop reading the rest of a long file (the server stops sending it).
      await reader.cancel().catch(() => {});
    }
    const bytes = Buffer.concat(parts);
    const content = args.encoding === "base64" ? bytes.toString("base64") : bytes.toString("utf8");
    const size = truncated ? (await sbx.filesystem.stat(args.path, { signal: extra.signal }).catch(() => undefined))?.size : bytes.length;
    const marker = truncated ? `\n[... truncated: the first ${got} bytes${size !== undefined ? ` of ${size}` : ""} shown; raise max_bytes or read it with exec (head, tail, sed -n) ...]` : "";
    return ok(content + marker, { path: args.path, encoding: args.encoding, content, bytes: got, truncated, ...(size !== undefined ? { size } : {}) });
  },
});

export const writeFile = tool({
  name: "write_file",
  description: "Create or replace a whole file in a sandbox (missing parent directories are created). content is utf8 text, or base64 bytes with encoding base64.",
  input: schemas.WriteFile,
  annotations: { title: "Write a file", readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
  async run(args, den, extra) {
    if (args.encoding === "base64" && !BASE64.test(args.content)) throw new DenError("invalid_argument", "content is not base64");
    const data = args.encoding === "base64" ? new Uint8Array(Buffer.from(args.content, "base64")) : args.content;
    const sbx = await den.sandbox(args.sandbox_id, extra.signal);
    const info = await sbx.filesystem.write(args.path, data, { signal: extra.signal });
    return ok(`wrote ${info.size} bytes to ${info.path}`, { path: info.path, size: info.size });
  },
});

export const listFiles = tool({
  name: "list_files",
  description: "List a directory in a sandbox: each entry's type (file, dir, symlink), size in bytes and path.",
  input: schemas.ListFiles,
  annotations: { title: "List a directory", readOnlyHint: true, openWorldHint: false },
  async run(args, den, extra) {
    const sbx = await den.sandbox(args.sandbox_id, extra.signal);
    const { entries, truncated } = await sbx.filesystem.list(args.path, { signal: extra.signal });
    const rows = entries.map((e) => ({ path: e.path, type: e.type, size: e.size, ...(e.target !== undefined ? { target: e.target } : {}) }));
    const lines = rows.map((e) => `${e.type.padEnd(7)} ${String(e.size).padStart(10)}  ${e.path}${e.target !== undefined ? ` -> ${e.target}` : ""}`);
    if (!lines.length) lines.push("(empty)");
    if (truncated) lines.push("[... truncated: the directory has more entries ...]");
    return ok(lines.join("\n"), { entries: rows, truncated });
  },
});
