import https from "node:https";
import type { ConnectionOptions } from "node:tls";
import { DenError, host } from "@den/protocol";
import { type Identity, type MachineTls, fingerprintOf, identityOf, newKeyAndCsr, parseJoinToken, pinMatches, verifyIssuedBy } from "@den/pki";

/** A join's whole exchange (handshake, CSR, answer) is short; a control plane that stalls is not waited for. */
const JOIN_TIMEOUT_MS = 15_000;
const REPLY_BYTES = 256 * 1024;

/**
 * `den host run --join TOKEN`: this machine makes its key here (it never leaves) and sends a
 * CSR with the token to a control plane's hosts' listener. The token is a secret, so it goes
 * only over a connection already proved against the token (as kubeadm's discovery does):
 * first the CA's certificate is fetched trusting nothing and taken only if it is the one the
 * token's pin names; then the join is posted over TLS that verifies the server is a control
 * plane of that CA. Someone in between can neither read the token nor hand out a certificate.
 */
export async function joinFleet(url: string, token: string, machineId: string, kind: Identity["kind"] = "host"): Promise<MachineTls> {
  const parsed = parseJoinToken(token);
  if (!parsed) throw new DenError("invalid_argument", "not a join token (den-join.<id>.<secret>.<ca pin>): make one with den hosts token create");
  const base = new URL(url);
  if (base.protocol !== "https:") throw new DenError("invalid_argument", `a join goes to a control plane's hosts' listener (https://...:8789), not ${base.origin}`);
  const discovery = await request(new URL(host.registration.ca.path, base), "GET", undefined, { rejectUnauthorized: false });
  const offered = discovery.status === 200 ? host.CaReply.safeParse(parseJson(discovery.text)) : undefined;
  if (!offered?.success) throw new DenError("agent_protocol_error", `${base.origin} did not answer with the deployment's CA (${discovery.status})`);
  const ca = offered.data.ca;
  if (!pinMatches(parsed.caPin, fingerprintOf(ca))) throw new DenError("forbidden", "the control plane's CA is not the one the join token names: the token was not sent (a wrong URL, or someone in between)");
  const { keyPem, csrPem } = await newKeyAndCsr({ kind, id: machineId });
  const body: host.JoinRequest = { token, csr: csrPem, machine_id: machineId };
  const { status, text } = await request(new URL(host.registration.join.path, base), "POST", JSON.stringify(body), {
    ca, rejectUnauthorized: true,
    checkServerIdentity: (_host, cert) => (cert.raw && identityOf(cert.raw)?.kind === "control-plane" ? undefined : new Error("the server is not a control plane of the join token's CA")),
  });
  const json = parseJson(text);
  if (status !== 200) {
    const err = (json as { error?: { code?: string; message?: string } } | undefined)?.error;
    throw new DenError(status === 401 ? "unauthorized" : "agent_protocol_error", `the control plane refused the join (${status}): ${err?.message ?? text.slice(0, 200)}`);
  }
  const reply = host.JoinReply.safeParse(json);
  if (!reply.success) throw new DenError("agent_protocol_error", "the control plane's join answer does not match the protocol");
  const { certificate } = reply.data;
  const mine = identityOf(certificate);
  if (!verifyIssuedBy(certificate, { certPem: ca }) || mine?.kind !== kind || mine.id !== machineId) throw new DenError("agent_protocol_error", `the certificate the control plane issued is not this ${kind}'s (a token made for another kind: den hosts token create --kind ${kind})`);
  return { key: keyPem, cert: certificate, ca };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** One bounded HTTPS call on a connection of its own (its TLS checks are the caller's). */
function request(url: URL, method: "GET" | "POST", body: string | undefined, tls: ConnectionOptions): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = https.request(url, {
      ...tls, method, minVersion: "TLSv1.3", timeout: JOIN_TIMEOUT_MS, agent: false,
      headers: body === undefined ? {} : { "content-type": "application/json", "content-length": Buffer.byteLength(body) },
    }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (c: Buffer) => {
        size += c.length;
        if (size > REPLY_BYTES) req.destroy(new Error("the answer is too large"));
        else chunks.push(c);
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error(`no answer from ${url.origin} in ${JOIN_TIMEOUT_MS / 1000} s`)));
    req.on("error", (e) => reject(new DenError("agent_unavailable", `could not join through ${url.origin}: ${e.message}`)));
    req.end(body);
  });
}
