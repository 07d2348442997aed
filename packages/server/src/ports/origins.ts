import { DenError } from "@den/protocol";
import type { ServerConfig } from "../config.js";

/** host[:port]: a name or IPv4 address (letters, digits, - . _ ~) or a bracketed IPv6 literal. */
const HOST_HEADER = /^(?:[A-Za-z0-9_.~-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/;

/**
 * The Host header, checked before it becomes the base of the URLs we hand out: garbage there
 * ("[::1", "a b", "") is the client's mistake, and "a/b" or "u@h" would parse as another host.
 */
export function requestHost(host: string | undefined): string | undefined {
  if (host === undefined) return undefined;
  if (HOST_HEADER.test(host) && URL.canParse(`http://${host}`)) return host;
  throw new DenError("invalid_argument", `malformed Host header ${JSON.stringify(host.slice(0, 256))}`);
}

/** Where users reach this server: DEN_PUBLIC_URL, else the request's Host, else the address it listens on. */
export function serverBase(config: Pick<ServerConfig, "ports" | "host" | "port">, hostHeader: string | undefined): URL {
  // No Host at all (HTTP/1.0): the address we listen on, an IPv6 one in brackets.
  const listen = config.host.includes(":") ? `[${config.host}]` : config.host;
  return new URL(config.ports.publicUrl ?? `http://${requestHost(hostHeader) ?? `${listen}:${config.port}`}`);
}

/**
 * `P-sbx-ID.<domain>` of a port: the virtual host under which an app sits at `/`
 * (sandbox ids hold an underscore, which host names should not; a dash stands for it).
 */
export function vhostName(sandbox: string, port: number, domain: string): string {
  return `${port}-${sandbox.replace("_", "-")}.${domain}`;
}

/**
 * The origin of a sandbox's port: its own host name, with the server's scheme and port.
 * Guest content is served to browsers only there, never on the API's origin (whose pages
 * and calls a guest's script would otherwise see).
 */
export function portOrigin(config: Pick<ServerConfig, "ports" | "host" | "port">, hostHeader: string | undefined, sandbox: string, port: number): URL {
  const u = new URL("/", serverBase(config, hostHeader));
  u.hostname = vhostName(sandbox, port, config.ports.domain);
  return u;
}
