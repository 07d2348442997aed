/**
 * The image rows: an OCI image in a registry on loopback (Debian's distribution registry)
 * made into a template through the API, the first time (pull, unpack, root disk, boot,
 * start, bake) and, in a full run, again with its layers cached, and creates from it beside creates from
 * `base` (the goal: within 1.3x). The image is Debian with Python serving HTTP, made from the
 * base template's own Debian tree; the full run adds a layer of random bytes (incompressible:
 * about 300 MB to pull instead of about 100 MB).
 */
import { randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, statSync, writeFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findBaseRootfs, makePythonHttpImage, pushOciLayout, startRegistry } from "@den/images/testing";
import { fmt, pct, row, time } from "./table.js";

type Api = (method: string, path: string, body?: unknown) => Promise<any>;

/** Bytes of an OCI layout's blobs (what a pull moves). */
function layoutBytes(layout: string): number {
  const dir = join(layout, "blobs", "sha256");
  return readdirSync(dir).reduce((n, f) => n + statSync(join(dir, f)).size, 0);
}

/** Adds a layer holding `mb` MiB of random bytes to the layout's image (umoci gzips it; random bytes stay their size). */
function addRandomLayer(layout: string, tag: string, mb: number, work: string): void {
  const root = join(work, "random-layer");
  execFileSync("mkdir", ["-p", join(root, "opt")]);
  writeFileSync(join(root, "opt", "random.bin"), randomBytes(mb * 1024 * 1024));
  const tar = join(work, "random-layer.tar");
  execFileSync("tar", ["-C", root, "-cf", tar, "."]);
  execFileSync("umoci", ["raw", "add-layer", "--image", `${layout}:${tag}`, tar]);
}

export async function benchImages(api: Api, dataDir: string, runs: number, full: boolean, made: string[]): Promise<string[]> {
  const notes: string[] = [];
  const rootfs = findBaseRootfs();
  if (!rootfs) return ["image rows skipped: no debootstrapped base tree in the build cache"];
  const work = mkdtempSync(join(tmpdir(), "den-bench-image-"));
  const registry = await startRegistry();
  const insecure = process.env.DEN_INSECURE_REGISTRIES;
  process.env.DEN_INSECURE_REGISTRIES = registry.host;
  try {
    const image = await makePythonHttpImage(work, { rootfs });
    if (full) addRandomLayer(image.layout, image.tag, 200, work);
    const size = layoutBytes(image.layout);
    await pushOciLayout(image.layout, image.tag, registry.pushHost, "bench/python:1");
    const ref = `${registry.host}/bench/python:1`;
    const body = { name: "bench-image", from_image: ref, ready_cmd: "python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8080/\")'", force: true };
    // The first time: nothing of it on the host (no cached layer, no cached step).
    rmSync(join(dataDir, "image-cache"), { recursive: true, force: true });
    const first = row(`image -> template ready, first time (${(size / 1e6).toFixed(0)} MB image: pull, unpack, boot, start, bake)`);
    first.den.push(await time(() => api("POST", "/v1/templates", body)));
    // The cached build again only in a full run: its time is a boot and a bake like the first's
    // (about 20 s of --quick's CI minutes), less the pull.
    const cached = full ? row(`image -> template ready, layers cached (${(size / 1e6).toFixed(0)} MB image)`) : undefined;
    if (cached) cached.den.push(await time(() => api("POST", "/v1/templates", body)));
    const fromBase = row("create from base -> first exec (API, beside the image rows)");
    const fromImage = row("create from an image template -> first exec (API)");
    for (let i = 0; i < runs; i++) {
      for (const [t, r] of [["base", fromBase], ["bench-image", fromImage]] as const) {
        let id = "";
        r.den.push(await time(async () => {
          id = (await api("POST", "/v1/sandboxes", { template: t })).id;
          made.push(id);
          await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "true" });
        }));
        await api("DELETE", `/v1/sandboxes/${id}`);
      }
    }
    const ratio = pct(fromImage.den, 50) / pct(fromBase.den, 50);
    notes.push(`create from an image template vs from base, to first exec (p50): ${fmt(pct(fromImage.den, 50))} vs ${fmt(pct(fromBase.den, 50))} (${ratio.toFixed(2)}x; goal 1.3x)`);
    notes.push(`image -> template ready: ${fmt(pct(first.den, 50))} the first time${cached ? `, ${fmt(pct(cached.den, 50))} with its layers cached` : ""} (${(size / 1e6).toFixed(0)} MB image)`);
    await api("DELETE", "/v1/templates/bench-image").catch(() => undefined);
  } finally {
    if (insecure === undefined) delete process.env.DEN_INSECURE_REGISTRIES;
    else process.env.DEN_INSECURE_REGISTRIES = insecure;
    await registry.close();
    rmSync(work, { recursive: true, force: true });
  }
  return notes;
}
