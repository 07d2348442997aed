#!/usr/bin/env node
// The house's walls, checked (CI runs this before the tests; `node scripts/check-house.mjs`):
//  1. packages import only the packages below them (LAYERS; a package's README says the same);
//  2. no import circle among the source files of the control plane, the server or the host agent
//     (type-only imports count too: a circle of types is a circle of meaning);
//  3. the server's surfaces reach the control plane through its services only: no import of a
//     repository (`@den/control-plane/db/...`, or a repository's class or factory from its
//     index) or of the host registry, no `cp.store` or `cp.hosts`; and E2B's envd (its own
//     folder) reaches Den through its seam alone: it imports nothing of the control plane;
//  4. no class in the control plane, host agent or runtime over MAX_LINES lines or MAX_METHODS
//     methods (a class with more has more than one job).
// Prints every violation and exits 1 if there is one. Reads the TypeScript sources with the
// TypeScript compiler's parser (no build needed).
import { readFileSync, readdirSync, existsSync, statSync } from "node:fs";
import { join, dirname, resolve, relative } from "node:path";
import ts from "typescript";

const root = resolve(process.argv[2] ?? new URL("..", import.meta.url).pathname);
const MAX_LINES = 400;
const MAX_METHODS = 30;

/** Which workspace packages each package may import (its own layer and below). */
const LAYERS = {
  protocol: [],
  images: ["protocol"],
  store: ["protocol"],
  pki: ["protocol"],
  runtime: ["protocol", "images", "store"],
  "host-agent": ["protocol", "images", "store", "runtime", "pki"],
  "control-plane": ["protocol", "store", "images", "pki"],
  dashboard: [],
  sdk: ["protocol"],
  mcp: ["protocol", "sdk"],
  server: ["protocol", "store", "images", "pki", "runtime", "host-agent", "control-plane", "dashboard", "mcp"],
  cli: ["protocol", "sdk", "mcp", "images", "store", "pki", "runtime", "host-agent", "control-plane", "server"],
  bench: ["protocol", "sdk", "images", "store", "runtime", "host-agent", "control-plane", "server"],
};
/** Packages whose files may not import one another in a circle. */
const NO_CIRCLES = ["control-plane", "server", "host-agent"];
/** Packages whose classes are held to the size limits. */
const SIZED = ["control-plane", "host-agent", "runtime"];
/** Control-plane modules the server's surfaces may not import: repositories and the host registry. */
const SURFACE_FORBIDDEN = [/^@den\/control-plane\/(dist\/src\/)?db(\/|$)/, /^@den\/control-plane\/(dist\/src\/)?hosts?\//];
/** What the control plane's index exports of its database: repositories, their factories, the database itself (the composition's and the tests'). */
const SURFACE_FORBIDDEN_NAMES = new Set(["Store", "buildStore", "volumeStore", "openDatabase", "migrations"]);
/**
 * The same through the ControlPlane object: a surface reads no repository (`cp.store`) and
 * picks no host (`cp.hosts`), by name or by destructuring (`const { store } = this.cp`).
 */
const SURFACE_REACH = [/\bcp\.(store|hosts)\b/, /\{[^}]*\b(store|hosts)\b[^}]*\}\s*=\s*(this\.)?cp\b/];
/** The server's composition (it builds the control plane and runs its loops), not a surface. */
const COMPOSITION = ["packages/server/src/server.ts"];
/** E2B's envd: it speaks to Den through its seam (e2b/envd/seam.ts) and imports nothing of the control plane. */
const SEAMED = "packages/server/src/e2b/envd/";

const problems = [];
/** Each package's declared dependencies, read once. */
const declaredCache = new Map();

function tsFiles(dir) {
  const out = [];
  if (!existsSync(dir)) return out;
  for (const f of readdirSync(dir)) {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) out.push(...tsFiles(p));
    else if (f.endsWith(".ts") && !f.endsWith(".d.ts")) out.push(p);
  }
  return out;
}

function parse(file) {
  return ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
}

/** Every module specifier a file imports or re-exports, static or dynamic (with the names a static import or re-export takes). */
function importsOf(sf) {
  const out = [];
  const visit = (node) => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      const bindings = ts.isImportDeclaration(node) ? node.importClause?.namedBindings : node.exportClause;
      const names = bindings && (ts.isNamedImports(bindings) || ts.isNamedExports(bindings)) ? bindings.elements.map((e) => (e.propertyName ?? e.name).text) : [];
      out.push({ spec: node.moduleSpecifier.text, names, line: sf.getLineAndCharacterOfPosition(node.getStart()).line + 1 });
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword && node.arguments[0] && ts.isStringLiteral(node.arguments[0])) {
      out.push({ spec: node.arguments[0].text, line: sf.getLineAndCharacterOfPosition(node.getStart()).line + 1 });
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      out.push({ spec: node.argument.literal.text, line: sf.getLineAndCharacterOfPosition(node.getStart()).line + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

const packages = readdirSync(join(root, "packages")).filter((p) => existsSync(join(root, "packages", p, "package.json")));
for (const pkg of packages) checkReadme(pkg);
for (const pkg of packages) {
  const src = join(root, "packages", pkg, "src");
  const files = tsFiles(src);
  const allowed = LAYERS[pkg];
  const graph = new Map();
  for (const file of files) {
    const rel = relative(root, file);
    const sf = parse(file);
    const edges = [];
    for (const { spec, names = [], line } of importsOf(sf)) {
      const m = /^@den\/([^/]+)/.exec(spec);
      if (m) {
        if (m[1] !== pkg && !declared(pkg).has(`@den/${m[1]}`)) problems.push(`${rel}:${line}: ${pkg} imports ${spec}, which its package.json does not list`);
        if (allowed && m[1] !== pkg && !allowed.includes(m[1])) problems.push(`${rel}:${line}: ${pkg} imports ${spec} (a ${pkg} may import ${allowed.length ? allowed.map((a) => "@den/" + a).join(", ") : "no other package"})`);
        if (pkg === "server" && SURFACE_FORBIDDEN.some((re) => re.test(spec))) problems.push(`${rel}:${line}: the server imports ${spec} (surfaces call the control plane's services, not its repositories or host registry)`);
        const database = names.filter((n) => SURFACE_FORBIDDEN_NAMES.has(n));
        if (pkg === "server" && !COMPOSITION.includes(rel) && m[1] === "control-plane" && database.length) problems.push(`${rel}:${line}: a surface imports ${database.join(", ")} from ${spec} (the database is the control plane's services' to read)`);
        if (rel.startsWith(SEAMED) && m[1] === "control-plane") problems.push(`${rel}:${line}: envd imports ${spec} (envd reaches Den through its seam, e2b/envd/seam.ts, alone)`);
      } else if (spec.startsWith(".")) {
        const target = resolve(dirname(file), spec).replace(/\.js$/, ".ts");
        edges.push(target);
      }
    }
    graph.set(file, edges);
    if (pkg === "server" && !COMPOSITION.includes(rel)) checkReach(rel);
    if (SIZED.includes(pkg)) checkClasses(sf, rel);
  }
  if (NO_CIRCLES.includes(pkg)) findCircles(graph);
}

/** A package's declared dependencies (a workspace link resolves an undeclared one too, until a clean install). */
function declared(pkg) {
  if (!declaredCache.has(pkg)) {
    const json = JSON.parse(readFileSync(join(root, "packages", pkg, "package.json"), "utf8"));
    declaredCache.set(pkg, new Set([...Object.keys(json.dependencies ?? {}), ...Object.keys(json.devDependencies ?? {}), ...Object.keys(json.peerDependencies ?? {})]));
  }
  return declaredCache.get(pkg);
}

/** Every package's README says what it owns and, on a `**May import:**` line, exactly the packages LAYERS lets it import. */
function checkReadme(pkg) {
  const file = join(root, "packages", pkg, "README.md");
  if (!existsSync(file)) return void problems.push(`packages/${pkg}: no README.md (what the package owns and what it may import)`);
  const line = readFileSync(file, "utf8").split("\n").find((l) => l.startsWith("**May import:**"));
  if (!line) return void problems.push(`packages/${pkg}/README.md: no "**May import:**" line`);
  const said = new Set([...line.matchAll(/@den\/([a-z-]+)/g)].map((m) => m[1]));
  const allowed = new Set(LAYERS[pkg] ?? []);
  const differ = [...said].filter((p) => !allowed.has(p)).concat([...allowed].filter((p) => !said.has(p)));
  if (differ.length) problems.push(`packages/${pkg}/README.md: its "May import" line and scripts/check-house.mjs's LAYERS differ on ${differ.map((p) => "@den/" + p).join(", ")}`);
}

function checkReach(rel) {
  const lines = readFileSync(join(root, rel), "utf8").split("\n");
  const at = lines.flatMap((l, i) => (SURFACE_REACH.some((re) => re.test(l)) ? [i + 1] : []));
  if (at.length) problems.push(`${rel}:${at.join(",")}: a surface reaches the control plane's repositories or hosts (cp.store, cp.hosts) ${at.length} time(s); call a service`);
}

function checkClasses(sf, rel) {
  const visit = (node) => {
    if (ts.isClassDeclaration(node) || ts.isClassExpression(node)) {
      const start = sf.getLineAndCharacterOfPosition(node.getStart()).line;
      const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line;
      const lines = end - start + 1;
      const methods = node.members.filter((m) => ts.isMethodDeclaration(m) || ts.isGetAccessor(m) || ts.isSetAccessor(m)).length;
      const name = node.name?.text ?? "(anonymous class)";
      if (lines > MAX_LINES) problems.push(`${rel}:${start + 1}: class ${name} has ${lines} lines (at most ${MAX_LINES})`);
      if (methods > MAX_METHODS) problems.push(`${rel}:${start + 1}: class ${name} has ${methods} methods (at most ${MAX_METHODS})`);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
}

/** Tarjan's strongly connected components: every component of more than one file is a circle. */
function findCircles(graph) {
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const on = new Set();
  const strong = (v) => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!idx.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const comp = [];
      let w;
      do {
        w = stack.pop();
        on.delete(w);
        comp.push(w);
      } while (w !== v);
      if (comp.length > 1) problems.push(`import circle of ${comp.length} files: ${comp.map((f) => relative(root, f)).sort().join(" <-> ")}`);
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) strong(v);
}

if (problems.length) {
  console.error(`check-house: ${problems.length} problem(s):\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(`check-house: ${packages.length} packages, imports by layer, no circles, classes within ${MAX_LINES} lines and ${MAX_METHODS} methods`);
