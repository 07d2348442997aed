import { readFile, realpath, stat } from "node:fs/promises";
import { extname, join, sep } from "node:path";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { assetsDir } from "@den/dashboard";

/**
 * The web dashboard: @den/dashboard's prebuilt static files at /dashboard/ (and `/` redirects
 * there). No auth: the files hold no secrets, and the pages call /v1 with the user's key.
 * Hidden from the OpenAPI document.
 */

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".txt": "text/plain; charset=utf-8",
  ".woff2": "font/woff2",
};

/** The browser loads nothing but Den's own files and talks to nothing but Den. */
const CSP = [
  "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "connect-src 'self'",
  "object-src 'none'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'",
].join("; ");

const PREFIX = "/dashboard/";

/**
 * The file that `rest` (the URL path after /dashboard/, still percent-encoded) names under
 * `root`, or undefined unless it is a plain relative path: every segment decoded once and
 * none empty, `.`/`..`, hidden, or holding a separator or NUL.
 */
export function assetPath(root: string, rest: string): string | undefined {
  const segments = rest.split("/");
  if (segments[segments.length - 1] === "") segments[segments.length - 1] = "index.html";
  const names: string[] = [];
  for (const s of segments) {
    let name: string;
    try {
      name = decodeURIComponent(s);
    } catch {
      return undefined;
    }
    if (!name || name.startsWith(".") || name.length > 255 || /[/\\\0:]/.test(name)) return undefined;
    names.push(name);
  }
  if (names.length > 16) return undefined;
  return join(root, ...names);
}

export function registerDashboardRoutes(app: FastifyInstance, root: string = assetsDir): void {
  let realRoot: Promise<string> | undefined;

  const notFound = (reply: FastifyReply, path: string) =>
    reply.status(404).send({ error: { code: "not_found", message: `no dashboard file ${path}` } });

  const serve = async (req: FastifyRequest, reply: FastifyReply) => {
    const path = (req.raw.url ?? "/").split("?")[0]!;
    // `/dashboard` without its slash: relative links in the page need the directory form.
    if (path === "/dashboard") return reply.redirect(PREFIX, 302);
    if (!path.startsWith(PREFIX)) return notFound(reply, path);
    const candidate = assetPath(root, path.slice(PREFIX.length));
    if (!candidate) return notFound(reply, path);
    // The real file must still be inside the real root (no symlink leads out).
    realRoot ??= realpath(root);
    let file: string;
    try {
      file = await realpath(candidate);
    } catch {
      return notFound(reply, path);
    }
    const base = await realRoot;
    if (!file.startsWith(base.endsWith(sep) ? base : base + sep)) return notFound(reply, path);
    const st = await stat(file).catch(() => undefined);
    if (!st?.isFile()) return notFound(reply, path);
    const etag = `W/"${st.size.toString(16)}-${Math.floor(st.mtimeMs).toString(16)}"`;
    reply
      .header("cache-control", "no-cache")
      .header("etag", etag)
      .header("x-content-type-options", "nosniff")
      .header("referrer-policy", "no-referrer")
      .header("content-security-policy", CSP)
      .type(TYPES[extname(file).toLowerCase()] ?? "application/octet-stream");
    if (req.headers["if-none-match"] === etag) return reply.status(304).send();
    return reply.send(await readFile(file));
  };

  app.get("/", { schema: { hide: true } }, async (_req, reply) => reply.redirect(PREFIX, 302));
  app.get("/dashboard", { schema: { hide: true } }, serve);
  app.get("/dashboard/*", { schema: { hide: true } }, serve);
}
