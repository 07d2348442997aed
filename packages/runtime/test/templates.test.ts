// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { buildImage, loadRecipe } from "@den/images";
import { bakeTemplate, cacheDir, type Runtime, type Sandbox } from "../src/index.js";
import { testRuntime } from "./helpers.js";

describe("template versions", () => {
  let rt: Runtime;
  const owned: Sandbox[] = [];
  before(async () => {
    rt = await testRuntime();
  });
  after(async () => {
    await Promise.all(owned.map((s) => s.destroy()));
    rt?.close();
  });

  test("changing a recipe yields a new version; snapshots of the old one still restore", async () => {
    const base = loadRecipe("base");
    const v1Recipe = { ...base, name: "versioned", description: "first" };
    const image = await buildImage(v1Recipe, { cacheDir: cacheDir() });
    const v1 = await bakeTemplate(rt, v1Recipe, image);
    const again = await bakeTemplate(rt, v1Recipe, image);
    assert.equal(again.version, v1.version);
    assert.equal(again.reused, true, "an unchanged recipe is not rebuilt");

    const sbx = await rt.create({ template: "versioned" });
    owned.push(sbx);
    await sbx.files.write("/workspace/v", "one");
    const snap = await rt.snapshot(sbx.id);
    assert.deepEqual(snap.manifest.template, { name: "versioned", version: v1.version });

    const v2 = await bakeTemplate(rt, { ...v1Recipe, description: "second" }, image);
    assert.notEqual(v2.version, v1.version);
    assert.equal((await rt.templates.resolve("versioned")).version, v2.version, "new sandboxes get the new version");
    assert.ok(existsSync(rt.templates.dir(v1)), "the old version is kept while referenced");

    const restored = await rt.restore(snap.id);
    owned.push(restored);
    assert.equal(restored.info.template.version, v1.version);
    assert.equal((await restored.files.read("/workspace/v")).toString(), "one");
    const fresh = await rt.create({ template: "versioned" });
    owned.push(fresh);
    assert.equal(fresh.info.template.version, v2.version);
    const pinned = await rt.create({ template: `versioned@${v1.version}` });
    owned.push(pinned);
    assert.equal(pinned.info.template.version, v1.version);

    // Once nothing references v1, it is garbage-collected.
    await Promise.all(owned.splice(0).map((s) => s.destroy()));
    await rt.deleteSnapshot(snap.id);
    assert.equal(existsSync(rt.templates.dir(v1)), false, "unreferenced old version removed");
    assert.ok(existsSync(rt.templates.dir(v2)));
  });
});
