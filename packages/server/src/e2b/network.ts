import { DenError, type api, type e2bApi } from "@den/protocol";

const DENY_ALL = "0.0.0.0/0";

/**
 * E2B's network settings as a Den policy. E2B lets `allowOut` punch holes in `denyOut`;
 * Den keeps one list: `denyOut: [0.0.0.0/0]` plus `allowOut` is an allowlist, `denyOut`
 * alone a denylist, and nothing at all (E2B's default) open egress. A denylist with
 * exceptions has no Den equivalent and is refused rather than half-applied.
 */
export function denPolicy(allowInternet: boolean | undefined, net: { allowOut?: string[] | undefined; denyOut?: string[] | undefined } | undefined): api.NetworkPolicy {
  if (allowInternet === false) return { egress: "none" };
  const allow = net?.allowOut ?? [];
  const deny = net?.denyOut ?? [];
  if (deny.includes(DENY_ALL)) return allow.length ? { egress: "allowlist", allow } : { egress: "none" };
  if (deny.length && allow.length) throw new DenError("invalid_argument", "network: allowOut exceptions to a denyOut list are not supported by Den (use denyOut [\"0.0.0.0/0\"] with allowOut, or denyOut alone)");
  return deny.length ? { egress: "open", deny } : { egress: "open" };
}

/** `PUT /sandboxes/{id}/network` replaces the whole configuration: omitted fields are cleared. */
export function denPolicyUpdate(body: e2bApi.NetworkUpdate): api.NetworkPolicy {
  return denPolicy(body.allow_internet_access, body);
}
