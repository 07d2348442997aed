// needs: one VM, network namespace (open egress), the e2b client, the code-interpreter-v1 template
/**
 * The docs' code blocks, run as a reader pastes them: every fenced block of README.md and
 * docs/*.md in a language a user runs (sh/bash/shell, ts/typescript, js/javascript,
 * python/py) runs against a real `den serve` this test starts on Den's default ports
 * (8787 for the API, 49983 for envd), so the docs' `localhost:8787` and defaults hold as
 * written. A block that must not run carries a marker on the line right before its fence:
 *
 *   <!-- snippet: not run — why -->
 *
 * and every block of another language (json, a directory tree, ...) must carry one too. The
 * test prints how many ran and how many were skipped by marker.
 *
 * What a snippet gets, as the docs tell the reader to set up: DEN_API_URL, DEN_API_KEY (an
 * admin key), the E2B_* variables of docs/e2b.md, `ID` (a running sandbox of `base`, for the
 * blocks that act on "a sandbox"), `den` and `npx den` as this checkout's CLI, and the Python
 * SDK on PYTHONPATH. Shell blocks run under `bash -e -o pipefail` in an empty directory of
 * their own, with `curl` made to fail on an HTTP error (`--fail-with-body`), so a wrong flag
 * or a refused request fails the block. TypeScript is compiled with the repo's `typescript`
 * (transpileModule: no type check) and run as an ES module. After each block the sandboxes,
 * checkpoints, volumes, webhooks and templates it left are removed (but `ID`; what was there
 * before the test is left alone).
 *
 * E2B's sandboxes (and so the E2B blocks) have open egress, which changes a host's
 * networking: this file runs in the network test namespace (scripts/netns-test.sh), where
 * the default ports are free too.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { ADMIN_KEY, CLI, client, spawnServer, stopProcess } from "../helpers.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "..");
const PORT = 8787;
const ENVD_PORT = 49983;
const URL_ = `http://127.0.0.1:${PORT}`;
const SNIPPET_TIMEOUT_MS = 180_000;

type Lang = "shell" | "ts" | "js" | "python";
const LANGS: Record<string, Lang> = { sh: "shell", bash: "shell", shell: "shell", ts: "ts", typescript: "ts", js: "js", javascript: "js", python: "python", py: "python" };

interface Block {
  file: string;
  line: number;
  info: string;
  lang: Lang | undefined;
  code: string;
  /** The reason of a `<!-- snippet: not run — reason -->` marker right before the fence. */
  notRun: string | undefined;
}

/** Every fenced block of a Markdown file (indented ones too, as in a list item), with its marker. */
function extractBlocks(file: string, text: string): Block[] {
  const lines = text.split("\n");
  const out: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,})\s*([^`\s]*)[^`]*$/.exec(lines[i]!);
    if (!open) continue;
    const [, indent, fence, info] = open as unknown as [string, string, string, string];
    let j = i + 1;
    while (j < lines.length && !new RegExp(`^\\s*${fence}\\s*$`).test(lines[j]!)) j++;
    if (j >= lines.length) throw new Error(`${file}:${i + 1}: a fence that is never closed`);
    const body = lines.slice(i + 1, j).map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l.trimStart()));
    let k = i - 1;
    while (k >= 0 && lines[k]!.trim() === "") k--;
    const marker = k >= 0 ? /<!--\s*snippet:\s*not run\s*(?:—|–|-|:)\s*(.+?)\s*-->/.exec(lines[k]!) : null;
    out.push({ file, line: i + 1, info, lang: LANGS[info.toLowerCase()], code: body.join("\n") + "\n", notRun: marker?.[1] });
    i = j;
  }
  return out;
}

function docsFiles(): string[] {
  const docs = join(ROOT, "docs");
  return [join(ROOT, "README.md"), ...readdirSync(docs).filter((f) => f.endsWith(".md")).sort().map((f) => join(docs, f))];
}

/** Inside scripts/netns-test.sh's namespace: no default route, and the suite says so. */
function inTestNamespace(): boolean {
  return process.env.DEN_NETNS_TEST === "1" && !execFileSync("ip", ["route", "show", "default"], { encoding: "utf8" }).trim();
}

function run(cmd: string, args: string[], opts: { cwd: string; env: Record<string, string> }): Promise<{ code: number | null; signal: string | null; out: string }> {
  return new Promise((resolve) => {
    const c: ChildProcess = spawn(cmd, args, { cwd: opts.cwd, env: { ...process.env, ...opts.env }, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let out = "";
    const take = (d: Buffer) => (out = (out + d.toString()).slice(-20_000));
    c.stdout!.on("data", take);
    c.stderr!.on("data", take);
    const timer = setTimeout(() => {
      out += `\n[docs-snippets: killed after ${SNIPPET_TIMEOUT_MS / 1000} s]`;
      try {
        process.kill(-c.pid!, "SIGKILL");
      } catch {
        // gone already
      }
    }, SNIPPET_TIMEOUT_MS);
    c.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out });
    });
  });
}

describe("the docs' code blocks, run against den serve", () => {
  const blocks = docsFiles().flatMap((f) => extractBlocks(relative(ROOT, f), readFileSync(f, "utf8")));
  const api = client(URL_);
  let server: ChildProcess | undefined;
  let work = "";
  let bin = "";
  let sharedId = "";
  let ran = 0;
  const skipped: string[] = [];
  const t0 = Date.now();

  const env = (): Record<string, string> => ({
    PATH: `${bin}:${process.env.PATH}`,
    DEN_API_URL: URL_,
    DEN_API_KEY: ADMIN_KEY,
    E2B_API_URL: URL_,
    E2B_API_KEY: ADMIN_KEY,
    E2B_SANDBOX_URL: `http://127.0.0.1:${ENVD_PORT}`,
    E2B_VOLUME_API_URL: `http://127.0.0.1:${ENVD_PORT}`,
    PYTHONPATH: join(ROOT, "packages", "sdk-python"),
    ID: sharedId,
  });

  /** `ID` for the blocks: one running sandbox, made again if a block removed it. */
  async function ensureShared(): Promise<void> {
    if (sharedId && (await api("GET", `/v1/sandboxes/${sharedId}`)).body?.state === "running") return;
    const r = await api("POST", "/v1/sandboxes", { template: "base", persistent: true, ttl_seconds: 3600 });
    assert.equal(r.status, 201, r.text);
    sharedId = r.body.id;
  }

  /** What was there before the first block (earlier test files' leftovers are theirs). */
  const before0 = new Set<string>();
  const lists = async () => ({
    sandboxes: ((await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []).filter((s: { state: string }) => s.state !== "destroyed").map((s: { id: string }) => `/v1/sandboxes/${s.id}`),
    checkpoints: ((await api("GET", "/v1/checkpoints")).body?.checkpoints ?? []).map((c: { id: string }) => `/v1/checkpoints/${c.id}`),
    volumes: ((await api("GET", "/v1/volumes")).body?.volumes ?? []).map((v: { name: string }) => `/v1/volumes/${v.name}`),
    webhooks: ((await api("GET", "/v1/webhooks")).body?.webhooks ?? []).map((w: { id: string }) => `/v1/webhooks/${w.id}`),
    templates: ((await api("GET", "/v1/templates")).body?.templates ?? []).filter((t: { owner: string | null }) => t.owner).map((t: { name: string }) => `/v1/templates/${t.name}`),
  });

  /** What a block left behind goes (sandboxes first: a volume they mount cannot), so the next starts as a reader's first does. */
  async function cleanUp(keep: string): Promise<void> {
    const now = await lists();
    for (const kind of ["sandboxes", "checkpoints", "volumes", "webhooks", "templates"] as const) {
      for (const path of now[kind]) {
        if (before0.has(path) || path === `/v1/sandboxes/${keep}`) continue;
        const r = await api("DELETE", path);
        if (r.status >= 300 && r.status !== 404) throw new Error(`cleaning up after a block: DELETE ${path}: ${r.status} ${r.text}`);
      }
    }
  }

  before(async () => {
    if (!inTestNamespace()) throw new Error("docs-snippets runs in the network test namespace: DEN_NETNS_TEST=1 scripts/netns-test.sh node --test ... (see scripts/test.sh)");
    work = mkdtempSync(join(tmpdir(), "den-snippets-"));
    // Blocks import @den/sdk, e2b, @e2b/code-interpreter as a reader's project does.
    symlinkSync(join(ROOT, "node_modules"), join(work, "node_modules"));
    bin = join(work, "bin");
    mkdirSync(bin);
    const realNpx = execFileSync("bash", ["-c", "command -v npx"], { encoding: "utf8" }).trim();
    const realCurl = execFileSync("bash", ["-c", "command -v curl"], { encoding: "utf8" }).trim();
    const script = (name: string, body: string) => {
      writeFileSync(join(bin, name), `#!/usr/bin/env bash\n${body}\n`);
      chmodSync(join(bin, name), 0o755);
    };
    script("den", `exec ${JSON.stringify(process.execPath)} ${JSON.stringify(CLI)} "$@"`);
    // `npx den` is this checkout's den (the README: "`den` is `npx den` from this checkout").
    script("npx", `if [ "$1" = den ]; then shift; exec den "$@"; fi\nexec ${JSON.stringify(realNpx)} "$@"`);
    script("curl", `exec ${JSON.stringify(realCurl)} --fail-with-body "$@"`);
    server = await spawnServer(PORT, { DEN_ENVD_PORT: String(ENVD_PORT), DEN_BUILD_EGRESS: "none" });
    for (const paths of Object.values(await lists())) for (const p of paths) before0.add(p);
    await ensureShared();
  });

  after(async () => {
    try {
      if (server) await cleanUp("");
    } finally {
      await stopProcess(server, "SIGTERM");
      if (work) rmSync(work, { recursive: true, force: true });
    }
    const secs = ((Date.now() - t0) / 1000).toFixed(1);
    console.log(`docs-snippets: ${ran} blocks ran, ${skipped.length} skipped by marker, in ${secs} s`);
    for (const s of skipped) console.log(`  skipped: ${s}`);
  });

  test("every block is runnable or marked", () => {
    const unmarked = blocks.filter((b) => !b.lang && !b.notRun).map((b) => `${b.file}:${b.line} (\`\`\`${b.info || "(no language)"})`);
    assert.deepEqual(unmarked, [], "blocks in a language the test does not run need a `<!-- snippet: not run — why -->` marker");
    assert.ok(blocks.filter((b) => b.lang && !b.notRun).length >= 10, "the docs' runnable blocks are found");
  });

  for (const b of blocks) {
    const name = `${b.file}:${b.line} (${b.info || "no language"})`;
    if (b.notRun || !b.lang) {
      test(name, { skip: b.notRun ?? "not a runnable language" }, () => {});
      if (b.notRun) skipped.push(`${name}: ${b.notRun}`);
      continue;
    }
    test(name, { timeout: SNIPPET_TIMEOUT_MS + 30_000 }, async () => {
      await ensureShared();
      const dir = mkdtempSync(join(work, "block-"));
      let cmd: string;
      let args: string[];
      if (b.lang === "shell") {
        writeFileSync(join(dir, "snippet.sh"), b.code);
        [cmd, args] = ["bash", ["-e", "-o", "pipefail", join(dir, "snippet.sh")]];
      } else if (b.lang === "python") {
        writeFileSync(join(dir, "snippet.py"), b.code);
        [cmd, args] = ["python3", [join(dir, "snippet.py")]];
      } else {
        const js = b.lang === "ts" ? ts.transpileModule(b.code, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText : b.code;
        writeFileSync(join(dir, "snippet.mjs"), js);
        [cmd, args] = [process.execPath, [join(dir, "snippet.mjs")]];
      }
      const started = Date.now();
      const r = await run(cmd, args, { cwd: dir, env: env() });
      const took = ((Date.now() - started) / 1000).toFixed(1);
      try {
        assert.ok(r.code === 0, `${name} failed (exit ${r.code ?? r.signal}, ${took} s):\n--- block ---\n${b.code}--- output ---\n${r.out}`);
        ran++;
        console.log(`docs-snippets: ${name} ran in ${took} s`);
      } finally {
        await cleanUp(sharedId);
      }
    });
  }
});

