import { readFileSync } from "node:fs";
import { X509Certificate } from "node:crypto";
import { checkServerIdentity, type ConnectionOptions } from "node:tls";

/**
 * DEN_DATABASE_URL's TLS parameters with libpq's meanings (what Postgres' own docs and every
 * provider's connection string assume), read once at start so a missing or unreadable file is
 * a clear error there instead of a throw inside the pool at the first query:
 *   sslmode=verify-full  the server's certificate is checked against sslrootcert's CA (or, with
 *                        none or sslrootcert=system, Node's roots plus NODE_EXTRA_CA_CERTS) and
 *                        must name the host of the URL;
 *   sslmode=verify-ca    checked against sslrootcert's CA (required), any host name;
 *   sslmode=require      encrypted, the server not checked (with sslrootcert: as verify-ca, as libpq);
 *   sslmode=disable      no TLS.
 * pg 8 on its own reads `require` and `verify-ca` as verify-full (its next major version takes
 * libpq's meanings), so Den decides here and hands pg the TLS options itself. `prefer` and
 * `allow` are refused: pg cannot fall back to plain text as libpq does, and a silent
 * downgrade is what they would promise. Any TLS parameter without sslmode means verify-full.
 * sslcert/sslkey: a client certificate, for a server that asks for one.
 */
export interface PostgresConnection {
  /** The URL without the TLS parameters (pg would read them again with its own meanings). */
  connectionString: string;
  /** undefined: the URL said nothing of TLS (pg's defaults, PGSSLMODE); false: sslmode=disable. */
  ssl?: false | ConnectionOptions;
  mode?: "disable" | "require" | "verify-ca" | "verify-full";
}

const TLS_PARAMS = ["sslmode", "sslrootcert", "sslcert", "sslkey", "ssl", "uselibpqcompat"];
const MODES = ["disable", "require", "verify-ca", "verify-full"] as const;

/** The URL with its password hidden, for errors and logs. */
export function redactDatabaseUrl(url: string): string {
  return url.replace(/\/\/([^:@/]*):[^@/]*@/, "//$1:***@");
}

export function postgresConnection(url: string): PostgresConnection {
  if (!/[?&](sslmode|sslrootcert|sslcert|sslkey)=/.test(url)) return { connectionString: url };
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`DEN_DATABASE_URL is not a valid URL: ${redactDatabaseUrl(url)}`);
  }
  const q = u.searchParams;
  const root = q.get("sslrootcert") ?? undefined;
  const cert = q.get("sslcert") ?? undefined;
  const key = q.get("sslkey") ?? undefined;
  const mode = q.get("sslmode") ?? "verify-full";
  if (mode === "prefer" || mode === "allow") {
    throw new Error(`DEN_DATABASE_URL: sslmode=${mode} is not supported (it would fall back to an unencrypted connection): use sslmode=verify-full with sslrootcert=<the server's CA certificate>, or sslmode=require to encrypt without checking the server, or sslmode=disable`);
  }
  if (!(MODES as readonly string[]).includes(mode)) throw new Error(`DEN_DATABASE_URL: sslmode must be one of ${MODES.join(", ")}; got ${mode}`);
  for (const p of TLS_PARAMS) q.delete(p);
  const connectionString = u.toString();
  const m = mode as (typeof MODES)[number];
  if (m === "disable") return { connectionString, ssl: false, mode: m };
  const ssl: ConnectionOptions = {};
  if (root === "system") {
    // As libpq: the system's roots are anyone's CA, so only the host name makes them safe.
    if (m !== "verify-full") throw new Error(`DEN_DATABASE_URL: sslrootcert=system needs sslmode=verify-full (got ${m}): with a public CA, only the host name check tells your server from anyone else's`);
  } else if (root !== undefined) {
    ssl.ca = readPem(root, "sslrootcert", "certificate");
  } else if (m === "verify-ca") {
    throw new Error("DEN_DATABASE_URL: sslmode=verify-ca needs sslrootcert=<file of the CA's certificate> (or use sslmode=verify-full, which also checks the host name)");
  }
  if ((cert === undefined) !== (key === undefined)) throw new Error("DEN_DATABASE_URL: sslcert and sslkey go together (a client certificate and its key)");
  if (cert !== undefined && key !== undefined) {
    ssl.cert = readPem(cert, "sslcert", "certificate");
    ssl.key = readPem(key, "sslkey", "key");
  }
  if (m === "require" && root === undefined) ssl.rejectUnauthorized = false;
  // verify-ca, and require with a CA (libpq's rule): the chain is checked, the name is not.
  else if (m === "verify-ca" || m === "require") ssl.checkServerIdentity = () => undefined;
  else {
    // The URL's host, said here: pg gives TLS no servername for an IP address, and Node then
    // checks the certificate against "localhost" (a certificate for localhost passed for 127.0.0.1).
    const host = (q.get("host") ?? u.hostname).replace(/^\[(.*)\]$/, "$1");
    ssl.checkServerIdentity = (_name, cert) => checkServerIdentity(host, cert);
  }
  return { connectionString, ssl, mode: m };
}

/** A PEM file named by the URL, read now: a clear error naming the parameter and the path. */
function readPem(path: string, param: string, kind: "certificate" | "key"): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    const why = err.code === "ENOENT" ? "no such file" : err.code === "EACCES" ? "permission denied" : err.code === "EISDIR" ? "a directory" : err.message;
    throw new Error(`DEN_DATABASE_URL's ${param}=${path} cannot be read (${why}): it must be a PEM ${kind} file readable by the user Den runs as`);
  }
  if (kind === "key") {
    if (!/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(text)) throw new Error(`DEN_DATABASE_URL's ${param}=${path} is not a PEM private key`);
    return text;
  }
  try {
    new X509Certificate(text);
  } catch {
    throw new Error(`DEN_DATABASE_URL's ${param}=${path} is not a PEM certificate`);
  }
  return text;
}

/**
 * A failed first connection, said in terms of DEN_DATABASE_URL: Node's TLS errors name
 * neither the URL's parameters nor what to change.
 */
export function explainConnectError(e: unknown, url: string): Error {
  const err = e as NodeJS.ErrnoException & { reason?: string };
  const code = err?.code ?? "";
  const where = redactDatabaseUrl(url).replace(/\?.*$/, "");
  const say = (what: string) => Object.assign(new Error(`could not connect to Postgres at ${where}: ${what} (${code || err?.message})`), { cause: e });
  if (code === "ERR_TLS_CERT_ALTNAME_INVALID") {
    return say(`the server's certificate does not name the host of DEN_DATABASE_URL (sslmode=verify-full checks it): ${err.reason ?? err.message}; connect by a name the certificate has, or reissue it with this one`);
  }
  if (/^(SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT(_LOCALLY)?|CERT_SIGNATURE_FAILURE)$/.test(code)) {
    return say("the server's certificate is not signed by the CA DEN_DATABASE_URL trusts (sslrootcert, or Node's roots without it): give sslrootcert=<the CA that signed the server's certificate>");
  }
  if (code === "CERT_HAS_EXPIRED" || code === "CERT_NOT_YET_VALID") return say("the server's certificate is outside its validity period");
  if (/does not support SSL/i.test(err?.message ?? "")) return say("the server does not speak TLS (ssl=on in postgresql.conf), and DEN_DATABASE_URL's sslmode asks for it");
  return e instanceof Error ? e : new Error(String(e));
}
