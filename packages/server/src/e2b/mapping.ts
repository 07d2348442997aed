import { e2bApi, type api } from "@den/protocol";
import { networkOf, type SandboxRow } from "@den/control-plane";
import type { E2bTokens } from "./tokens.js";

const iso = (ms: number | null): string => new Date(ms ?? 0).toISOString();

/** Den's states as E2B names them: hibernated is paused; creating counts as running. */
export function e2bState(row: Pick<SandboxRow, "state">): e2bApi.SandboxState {
  return row.state === "hibernated" ? "paused" : "running";
}

/** The Den states behind E2B's. */
export function denStates(states: e2bApi.SandboxState[] | undefined): string[] {
  const want = states?.length ? states : (["running", "paused"] as const);
  return want.flatMap((s) => (s === "paused" ? ["hibernated"] : ["running", "creating"]));
}

/** Where a sandbox's network stands in E2B's terms. */
export function e2bNetwork(policy: api.NetworkPolicy): { allowInternetAccess: boolean; network?: e2bApi.SandboxDetail["network"] } {
  if (policy.egress === "none") return { allowInternetAccess: false };
  if (policy.egress === "allowlist") return { allowInternetAccess: true, network: { allowOut: policy.allow ?? [], denyOut: ["0.0.0.0/0"] } };
  return { allowInternetAccess: true, ...(policy.deny?.length ? { network: { denyOut: policy.deny } } : {}) };
}

export class E2bMapper {
  /** `domain`: what `getHost(port)` puts after `<port>-<id>.` (read per answer: the port is known only once listening). */
  constructor(private readonly tokens: E2bTokens, private readonly domainOf: () => string) {}

  private get domain(): string {
    return this.domainOf();
  }

  /** What create, connect and fork answer. */
  sandbox(row: SandboxRow, templateId = row.template): e2bApi.Sandbox {
    return {
      sandboxID: row.id, templateID: templateId, clientID: "den", envdVersion: e2bApi.ENVD_VERSION,
      envdAccessToken: this.tokens.envd(row.id), trafficAccessToken: row.public_ports ? null : this.tokens.traffic(row.id), domain: this.domain,
    };
  }

  listed(row: SandboxRow): e2bApi.ListedSandbox {
    return {
      sandboxID: row.id, templateID: row.template, clientID: "den", startedAt: iso(row.created_at), endAt: iso(row.expires_at),
      state: e2bState(row), cpuCount: row.vcpus, memoryMB: row.memory_mb, diskSizeMB: row.disk_mb, envdVersion: e2bApi.ENVD_VERSION,
      metadata: JSON.parse(row.metadata) as Record<string, string>,
    };
  }

  /** `mounts`: the volumes it mounts (by name, as the client lists them). */
  detail(row: SandboxRow, mounts: e2bApi.SandboxVolumeMount[] = []): e2bApi.SandboxDetail {
    const net = e2bNetwork(networkOf(row));
    return {
      ...(mounts.length ? { volumeMounts: mounts } : {}),
      ...this.listed(row), envdAccessToken: this.tokens.envd(row.id), domain: this.domain, allowInternetAccess: net.allowInternetAccess,
      ...(net.network ? { network: net.network } : {}),
      lifecycle: { onTimeout: row.on_deadline.startsWith("hibernate") ? "pause" : "kill", autoResume: row.auto_resume === 1 },
    };
  }
}
