// needs: qemu-img, qemu-system (no guest: -M none)
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { openImages, rootDiskArgs, slotArgs } from "../src/block-graph.js";
import type { VolumeAttachment } from "../src/volumes.js";

import { qcow2Chain, qemuImg } from "./qcow2-chain.js";

interface BlockNode { "node-name": string; file: string; "backing_file"?: string; drv: string; ro: boolean }

/** The block nodes a QEMU (no machine, no guest) makes of Den's arguments and these descriptors (from fd 3 on). */
async function nodesOf(args: string[], fds: number[]): Promise<BlockNode[]> {
  const qemu = spawn("qemu-system-x86_64", ["-M", "none", "-nodefaults", "-display", "none", "-qmp", "stdio", ...args], { stdio: ["pipe", "pipe", "pipe", ...fds] });
  let out = "";
  let err = "";
  qemu.stdout!.on("data", (d: Buffer) => { out += d.toString(); });
  qemu.stderr!.on("data", (d: Buffer) => { err += d.toString(); });
  qemu.stdin!.write(['{"execute":"qmp_capabilities"}', '{"execute":"query-named-block-nodes"}', '{"execute":"quit"}'].join("\n") + "\n");
  const code = await new Promise<number | null>((r) => qemu.on("close", r));
  assert.equal(code, 0, `QEMU failed: ${err}`);
  const reply = out.split("\n").filter(Boolean).map((l) => JSON.parse(l) as { return?: unknown }).find((m) => Array.isArray(m.return));
  return reply!.return as BlockNode[];
}

const openFds = () => readdirSync("/proc/self/fd").length;

test("QEMU opens the graph Den states: a header naming /etc/shadow is refused by Den, and not followed by QEMU even unchecked", async () => {
  const dir = mkdtempSync(join(tmpdir(), "den-graph-"));
  try {
    const { base, mid, top } = qcow2Chain(dir);
    const vol = join(dir, "vol.qcow2");
    qemuImg("create", "-q", "-f", "qcow2", vol, "16M");
    const volumes: VolumeAttachment[] = [{ volume: "v", image: vol, path: "/data", readOnly: false, slot: 2 }];

    // As Den starts a VM: each image opened and checked, the graph stated.
    const fds = openImages(top, [mid, base], volumes);
    const args = [...rootDiskArgs(2, volumes), ...slotArgs(volumes)];
    let nodes: BlockNode[];
    try {
      nodes = await nodesOf(args, [...fds.disk, -1, ...fds.volumes, ...fds.backing].map((fd) => (fd < 0 ? openSync("/dev/null", "r") : fd)));
    } finally {
      for (const fd of [...fds.disk, ...fds.volumes, ...fds.backing]) closeSync(fd);
    }
    const byName = new Map(nodes.map((n) => [n["node-name"], n]));
    assert.equal(byName.get("root-q")?.backing_file, byName.get("root-b0")?.file, "the top's backing is the node Den named");
    assert.equal(byName.get("root-b0")?.backing_file, byName.get("root-b1")?.file);
    assert.equal(byName.get("root-b1")?.file, "/dev/fdset/11");
    assert.equal(byName.get("root-b1")?.backing_file, undefined, "the bottom has none");
    assert.equal(byName.get("root-b1")?.ro, true);
    assert.equal(byName.get("volq2")?.backing_file, undefined);

    // An escaped QEMU rewrites the top's backing name and the volume's: Den refuses at the open...
    qemuImg("rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2", "-b", "/etc/shadow", top);
    qemuImg("rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2", "-b", "/etc/shadow", vol);
    const before = openFds();
    assert.throws(() => openImages(top, [mid, base], volumes), (e: unknown) => e instanceof DenError && e.code === "disk_corrupt" && /top\.qcow2.*"\/etc\/shadow"/.test(e.message));
    assert.throws(() => openImages(join(dir, "fine.qcow2"), [], []), /ENOENT/);
    qemuImg("rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2", "-b", mid, top);
    assert.throws(() => openImages(top, [mid, base], volumes), (e: unknown) => e instanceof DenError && e.code === "disk_corrupt" && /vol\.qcow2.*"\/etc\/shadow", expected none/.test(e.message));
    assert.equal(openFds(), before, "a refused open leaves no descriptor behind");

    // ...and QEMU, given the same graph over the rewritten images unchecked, still opens only its descriptors.
    qemuImg("rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2", "-b", "/etc/shadow", top);
    const raw = [openSync(top, "r+"), openSync(top, "r"), openSync("/dev/null", "r"), openSync(vol, "r+"), openSync(vol, "r"), openSync(mid, "r"), openSync(base, "r")];
    try {
      nodes = await nodesOf(args, raw);
    } finally {
      for (const fd of raw) closeSync(fd);
    }
    // (Its image info still quotes the header's name: `file` and `backing_file` are what it opened.)
    const opened = nodes.map((n) => [n.file, n.backing_file ?? ""]).flat();
    assert.ok(!opened.some((f) => f.includes("/etc/shadow")), `QEMU opened no node from a header's name: ${JSON.stringify(opened)}`);
    assert.match(nodes.find((n) => n["node-name"] === "root-q")?.backing_file ?? "", /"filename": "\/dev\/fdset\/10"/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
