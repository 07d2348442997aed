/**
 * A `fetch` for the SDK client the /mcp route's tools use: it calls this server's own
 * listener over node:http, sending the MCP request's Host header, which Node's global fetch
 * would replace with the listener's address. So what /v1 derives from Host (the signed port
 * URLs of get_port_url, unless DEN_PUBLIC_URL says where users reach Den) is what the MCP
 * caller would have got calling /v1 itself.
 */
import http from "node:http";
import { Readable } from "node:stream";

export function fetchWithHost(host: string | undefined): typeof fetch {
  return (input, init = {}) => new Promise<Response>((resolve, reject) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((v, k) => (headers[k] = v));
    if (host !== undefined) headers.host = host;
    const req = http.request(url, { method: init.method ?? "GET", headers, ...(init.signal ? { signal: init.signal } : {}) }, (res) => {
      const status = res.statusCode ?? 502;
      const out = new Headers();
      for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) out.set(k, Array.isArray(v) ? v.join(", ") : v);
      // A body-less status must get a null body (the Response constructor refuses one).
      const body = status === 204 || status === 304 ? (res.resume(), null) : (Readable.toWeb(res) as ReadableStream<Uint8Array>);
      resolve(new Response(body, { status, statusText: res.statusMessage ?? "", headers: out }));
    });
    req.on("error", reject);
    const body = init.body;
    if (body === undefined || body === null) req.end();
    else if (typeof body === "string" || body instanceof Uint8Array) req.end(body);
    else if (body instanceof ReadableStream) Readable.fromWeb(body as import("node:stream/web").ReadableStream).on("error", (e) => req.destroy(e)).pipe(req);
    else reject(new TypeError("fetchWithHost: unsupported body type"));
  });
}
