import https from "node:https";
import type { TLSSocket } from "node:tls";
import { DenError, host } from "@den/protocol";
import { type MachineTls, fingerprintOf, identityOf, newKeyAndCsr, parseJoinToken, pinMatches, verifyIssuedBy } from "@den/pki";

/** A join's whole exchange (handshake, CSR, answer) is short; a control plane that stalls is not waited for. */
const JOIN_TIMEOUT_MS = 15_000;
const REPLY_BYTES = 256 * 1024;

/**
 * `den host run --join TOKEN`: this machine makes its key here (it never leaves), sends a
 * CSR with the token to a control plane's hosts' listener, and takes the certificate it gets
 * only once the answer proves itself against the token: nothing is trusted before (the
 * connection is made without verifying), then the CA in the answer must be the one the
 * token's pin names, and the server's certificate must be a control plane's of that CA.
 */
export async function joinFleet(url: string, token: string, machineId: string): Promise<MachineTls> {
  const parsed = parseJoinToken(token);
  if (!parsed) throw new DenError("invalid_argument", "not a join token (den-join.<id>.<secret>.<ca pin>): make one with den hosts token create");
  const { keyPem, csrPem } = await newKeyAndCsr({ kind: "host", id: machineId });
  const body: host.JoinRequest = { token, csr: csrPem, machine_id: machineId };
  const { status, text, serverCert } = await post(new URL(host.registration.join.path, url), JSON.stringify(body));
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  if (status !== 200) {
    const err = (json as { error?: { code?: string; message?: string } } | undefined)?.error;
    throw new DenError(status === 401 ? "unauthorized" : "agent_protocol_error", `the control plane refused the join (${status}): ${err?.message ?? text.slice(0, 200)}`);
  }
  const reply = host.JoinReply.safeParse(json);
  if (!reply.success) throw new DenError("agent_protocol_error", "the control plane's join answer does not match the protocol");
  const { certificate, ca } = reply.data;
  if (!pinMatches(parsed.caPin, fingerprintOf(ca))) throw new DenError("forbidden", "the control plane's CA is not the one the join token names: refusing its certificate (a wrong URL, or someone in between)");
  if (!serverCert || !verifyIssuedBy(serverCert, { certPem: ca }) || identityOf(serverCert)?.kind !== "control-plane") {
    throw new DenError("forbidden", "the server that answered is not a control plane of the join token's CA: refusing its certificate");
  }
  const mine = identityOf(certificate);
  if (!verifyIssuedBy(certificate, { certPem: ca }) || mine?.kind !== "host" || mine.id !== machineId) throw new DenError("agent_protocol_error", "the certificate the control plane issued is not this host's");
  return { key: keyPem, cert: certificate, ca };
}

/** One POST over TLS that verifies nothing (the caller checks the answer against the token), with the server's certificate. */
function post(url: URL, body: string): Promise<{ status: number; text: string; serverCert: string | undefined }> {
  if (url.protocol !== "https:") return Promise.reject(new DenError("invalid_argument", `a join goes to a control plane's hosts' listener (https://...:8789), not ${url.origin}`));
  return new Promise((resolve, reject) => {
    const req = https.request(url, {
      // A connection of its own (agent: false): the certificate checked is the one this server presents now.
      method: "POST", rejectUnauthorized: false, minVersion: "TLSv1.3", timeout: JOIN_TIMEOUT_MS, agent: false,
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) },
    }, (res) => {
      const cert = (res.socket as TLSSocket).getPeerX509Certificate?.();
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (c: Buffer) => {
        size += c.length;
        if (size > REPLY_BYTES) req.destroy(new Error("the join answer is too large"));
        else chunks.push(c);
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8"), serverCert: cert?.toString() }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error(`no answer from ${url.origin} in ${JOIN_TIMEOUT_MS / 1000} s`)));
    req.on("error", (e) => reject(new DenError("agent_unavailable", `could not join through ${url.origin}: ${e.message}`)));
    req.end(body);
  });
}
