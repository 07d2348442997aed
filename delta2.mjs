import { Runtime } from "@den/runtime";
import { statSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
const rt = await Runtime.open({ dataDir: "/var/lib/den-test" });
const sbx = await rt.create({ template: "base" });
await sbx.exec(["sh", "-c", "head -c 52428800 /dev/urandom > /dev/shm/blob"]);
const s = await rt.snapshot(sbx.id, { ignoreShared: false });
console.log("state", statSync(join(s.dir, "state.bin")).size);
process.on("uncaughtException", (e) => { console.log("UNCAUGHT", e.stack); });
let cid;
try {
  const c = await rt.restore(s.id);
  cid = c.id;
  console.log("restored", c.id);
  const r = await c.exec(["sh", "-c", "sha256sum /dev/shm/blob | cut -c1-8"]);
  console.log(r.stdout.toString());
  await c.destroy();
} catch (e) { console.log("ERR", e); }
for (const d of readdirSync("/var/lib/den-test/sandboxes")) { try { console.log(d, readFileSync(`/var/lib/den-test/sandboxes/${d}/qemu.log`, "utf8").slice(-500)); } catch {} }
await new Promise((r) => setTimeout(r, 1000));
await rt.deleteSnapshot(s.id);
await sbx.destroy(); rt.close();
