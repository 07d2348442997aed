import { createReadStream, createWriteStream, existsSync, statSync } from "node:fs";
import { rename } from "node:fs/promises";
import { basename, join, posix } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { randomBytes } from "node:crypto";
import type { Command } from "commander";
import { Volumes } from "@den/sdk";
import { Progress, UsageError } from "../output.js";

/** `NAME:/path`: a file of a volume (the name as volumes are named, the path from its root). */
const REMOTE = /^([a-z0-9][a-z0-9-]{0,62}):(\/.*)$/;

function counting(p: Progress): Transform {
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      p.add(chunk.length);
      cb(null, chunk);
    },
  });
}

/** `den volume cp SRC DST`: one file to or from a volume, without a sandbox; one side is `NAME:/path`. */
export function registerVolumeCp(volume: Command): void {
  volume
    .command("cp")
    .description("copy a file between this machine and a volume (NAME:/path on one side), no sandbox needed")
    .argument("<src>", "a local file or NAME:/path")
    .argument("<dst>", "a local path or NAME:/path")
    .addHelpText("after", "\nExamples:\n  den volume cp ./data.csv work:/in/data.csv\n  den volume cp work:/out/report.txt .\n")
    .action(async (src: string, dst: string) => {
      const s = REMOTE.exec(src);
      const d = REMOTE.exec(dst);
      if (!!s === !!d) throw new UsageError("den volume cp wants exactly one side as NAME:/path");
      if (d) {
        if (!existsSync(src) || !statSync(src).isFile()) throw new UsageError(`not a file: ${src} (den volume cp copies one file; mount the volume in a sandbox for more)`);
        const p = new Progress(`${src} -> ${dst}`, statSync(src).size);
        await Volumes.writeFile(d[1]!, d[2]!, Readable.toWeb(createReadStream(src).pipe(counting(p))) as ReadableStream<Uint8Array>);
        p.finish();
        return;
      }
      const into = existsSync(dst) && statSync(dst).isDirectory();
      const target = into ? join(dst, posix.basename(s![2]!) || basename(s![2]!)) : dst;
      const p = new Progress(`${src} -> ${target}`, null);
      // Written beside the target and renamed: an interrupted copy never leaves half a file.
      const part = `${target}.den-part-${randomBytes(4).toString("hex")}`;
      await pipeline(Readable.fromWeb((await Volumes.readStream(s![1]!, s![2]!)) as import("node:stream/web").ReadableStream<Uint8Array>), counting(p), createWriteStream(part));
      await rename(part, target);
      p.finish();
    });
}
