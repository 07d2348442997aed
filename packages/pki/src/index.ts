export { type Identity, IDENTITY_KINDS, MACHINE_ID, checkIdentity, identityOf, identityUri } from "./identity.js";
export { type Ca, newCa, initCa, loadCa, fingerprintOf } from "./ca.js";
export { MAX_CSR_BYTES, MAX_CERT_TTL_HOURS, checkCsrSize, newKeyAndCsr, issue, certInfo, verifyIssuedBy, renewAt, renewDelay } from "./certs.js";
export { writeIdentityFiles, writeAtomic, IDENTITY_FILES, CA_FILES } from "./files.js";
export { MAX_JOIN_TOKEN, newJoinToken, parseJoinToken, tokenMatches, pinMatches } from "./tokens.js";
export { type MachineTls, readMachineTls, ownIdentity, serverTlsOptions, clientTlsOptions, peerIdentity, peerSerial, issueMachine } from "./tls.js";
