// needs: nothing
/**
 * Den's envd contract (@den/protocol `e2b`) against the protobuf descriptors the installed
 * `e2b` package ships: every field name Den reads or writes must be one the client knows.
 * The descriptors are decoded here with a few lines of protobuf wire format.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, it } from "node:test";
import { e2b } from "@den/protocol";
import { entryInfo, permissions } from "../src/e2b/envd/entry.js";
import { endEvent } from "../src/e2b/envd/process-table.js";

type Field = { no: number; bytes?: Buffer; int?: number };

function decode(b: Buffer): Field[] {
  const out: Field[] = [];
  let i = 0;
  const varint = () => {
    let v = 0;
    let mul = 1;
    for (;;) {
      const x = b[i++]!;
      v += (x & 0x7f) * mul;
      mul *= 128;
      if (!(x & 0x80)) return v;
    }
  };
  while (i < b.length) {
    const tag = varint();
    const wt = tag % 8;
    const no = Math.floor(tag / 8);
    if (wt === 0) out.push({ no, int: varint() });
    else if (wt === 2) {
      const len = varint();
      out.push({ no, bytes: b.subarray(i, i + len) });
      i += len;
    } else if (wt === 5) i += 4;
    else if (wt === 1) i += 8;
    else throw new Error(`wire type ${wt}`);
  }
  return out;
}
const str = (fs: Field[], no: number) => fs.find((f) => f.no === no)?.bytes?.toString("utf8");
const all = (fs: Field[], no: number) => fs.filter((f) => f.no === no).map((f) => decode(f.bytes!));

/** protoc's default json_name: underscores dropped, the letter after each capitalised. */
const jsonName = (n: string) => n.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

interface Message { fields: Map<string, number>; nested: Map<string, Message> }
/** FileDescriptorProto: 2 package, 4 message_type, 5 enum_type, 6 service. */
function readFile(fd: Field[]) {
  const msg = (d: Field[]): Message => ({
    // FieldDescriptorProto: 1 name, 3 number, 10 json_name (left out when it is the default lowerCamel of the name).
    fields: new Map(all(d, 2).map((f) => [str(f, 10) ?? jsonName(str(f, 1)!), f.find((x) => x.no === 3)!.int!])),
    nested: new Map(all(d, 3).map((n) => [str(n, 1)!, msg(n)])),
  });
  return {
    pkg: str(fd, 2)!,
    messages: new Map(all(fd, 4).map((d) => [str(d, 1)!, msg(d)])),
    enums: new Map(all(fd, 5).map((e) => [str(e, 1)!, all(e, 2).map((v) => str(v, 1)!)])),
    // MethodDescriptorProto: 1 name, 6 server_streaming.
    services: all(fd, 6).map((s) => ({ name: str(s, 1)!, methods: all(s, 2).map((m) => ({ name: str(m, 1)!, stream: m.find((x) => x.no === 6)?.int === 1 })) })),
  };
}

const require = createRequire(import.meta.url);
const src = readFileSync(require.resolve("e2b").replace(/index\.js$/, "index.mjs"), "utf8");
const files = [...src.matchAll(/fileDesc\("([^"]+)"/g)].map((m) => readFile(decode(Buffer.from(m[1]!, "base64"))));
const file = (pkg: string) => files.find((f) => f.pkg === pkg)!;
const proc = file("process");
const fsys = file("filesystem");

function message(f: ReturnType<typeof readFile>, path: string): Message {
  const [top, ...rest] = path.split(".");
  let m = f.messages.get(top!);
  for (const r of rest) m = m?.nested.get(r);
  assert.ok(m, `descriptor has message ${path}`);
  return m;
}

function keysKnown(keys: string[], m: Message, what: string): void {
  for (const k of keys) assert.ok(m.fields.has(k), `${what}.${k} is a field of the descriptor (has ${[...m.fields.keys()].join(", ")})`);
}

const shapeKeys = (s: unknown) => Object.keys((s as { shape: Record<string, unknown> }).shape);

describe("envd contract vs the e2b package's descriptors", () => {
  it("finds both protos", () => {
    assert.ok(proc && fsys, "process and filesystem descriptors in e2b's dist");
  });

  it("request schemas use the descriptors' json names", () => {
    const pairs: Array<[unknown, ReturnType<typeof readFile>, string]> = [
      [e2b.StartRequest, proc, "StartRequest"], [e2b.ProcessConfig, proc, "ProcessConfig"], [e2b.ConnectRequest, proc, "ConnectRequest"],
      [e2b.ProcessSelector, proc, "ProcessSelector"], [e2b.SendInputRequest, proc, "SendInputRequest"], [e2b.ProcessInput, proc, "ProcessInput"],
      [e2b.SendSignalRequest, proc, "SendSignalRequest"], [e2b.CloseStdinRequest, proc, "CloseStdinRequest"], [e2b.UpdateRequest, proc, "UpdateRequest"],
      [e2b.Pty, proc, "PTY"], [e2b.PtySize, proc, "PTY.Size"], [e2b.ListRequest, proc, "ListRequest"],
      [e2b.StatRequest, fsys, "StatRequest"], [e2b.MakeDirRequest, fsys, "MakeDirRequest"], [e2b.RemoveRequest, fsys, "RemoveRequest"],
      [e2b.MoveRequest, fsys, "MoveRequest"], [e2b.ListDirRequest, fsys, "ListDirRequest"], [e2b.WatchDirRequest, fsys, "WatchDirRequest"],
      [e2b.CreateWatcherRequest, fsys, "CreateWatcherRequest"], [e2b.WatcherIdRequest, fsys, "GetWatcherEventsRequest"], [e2b.WatcherIdRequest, fsys, "RemoveWatcherRequest"],
    ];
    for (const [schema, f, name] of pairs) keysKnown(shapeKeys(schema), message(f, name), name);
  });

  it("what Den sends uses the descriptors' json names", () => {
    const entry = entryInfo("/tmp/x", { type: "symlink", size: 3, mode: 0o777, mtime_ms: 0, uid: 0, gid: 1000, target: "/y" }, { a: "b" });
    keysKnown(Object.keys(entry), message(fsys, "EntryInfo"), "EntryInfo");
    keysKnown(Object.keys(endEvent({ exitCode: 1, signal: null, timedOut: false })), message(proc, "ProcessEvent.EndEvent"), "EndEvent");
    keysKnown(["start", "data", "end", "keepalive"], message(proc, "ProcessEvent"), "ProcessEvent");
    keysKnown(["stdout", "stderr", "pty"], message(proc, "ProcessEvent.DataEvent"), "DataEvent");
    keysKnown(["event"], message(proc, "StartResponse"), "StartResponse");
    keysKnown(["event"], message(proc, "ConnectResponse"), "ConnectResponse");
    keysKnown(["config", "pid", "tag"], message(proc, "ProcessInfo"), "ProcessInfo");
    keysKnown(["processes"], message(proc, "ListResponse"), "ListResponse");
    keysKnown(["start", "filesystem", "keepalive"], message(fsys, "WatchDirResponse"), "WatchDirResponse");
    keysKnown(["name", "type", "entry"], message(fsys, "FilesystemEvent"), "FilesystemEvent");
    keysKnown(["entry"], message(fsys, "StatResponse"), "StatResponse");
    keysKnown(["entries"], message(fsys, "ListDirResponse"), "ListDirResponse");
    keysKnown(["watcherId"], message(fsys, "CreateWatcherResponse"), "CreateWatcherResponse");
    keysKnown(["events"], message(fsys, "GetWatcherEventsResponse"), "GetWatcherEventsResponse");
  });

  it("enums and services match", () => {
    assert.deepEqual(e2b.FileType.options, fsys.enums.get("FileType"));
    assert.deepEqual(e2b.EventType.options, fsys.enums.get("EventType"));
    assert.deepEqual(e2b.Signal.options, proc.enums.get("Signal"));
    for (const f of [proc, fsys]) {
      for (const s of f.services) {
        const ours = e2b.SERVICES[`${f.pkg}.${s.name}` as keyof typeof e2b.SERVICES];
        const methods = s.methods.filter((m) => m.name !== "StreamInput"); // client streaming: the JS client never calls it
        assert.deepEqual([...ours.unary].sort(), methods.filter((m) => !m.stream).map((m) => m.name).sort(), `${s.name} unary`);
        assert.deepEqual([...ours.stream].sort(), methods.filter((m) => m.stream).map((m) => m.name).sort(), `${s.name} streams`);
      }
    }
  });

  it("permissions read as Go's FileMode.String()", () => {
    assert.equal(permissions("file", 0o644), "-rw-r--r--");
    assert.equal(permissions("dir", 0o755), "drwxr-xr-x");
    assert.equal(permissions("symlink", 0o777), "Lrwxrwxrwx");
    assert.equal(permissions("dir", 0o1777), "dtrwxrwxrwx");
  });
});
