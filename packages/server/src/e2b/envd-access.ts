import { api } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import { DenError } from "@den/protocol";
import { checkCredentials, EnvdUnavailable, signatureDigest, signedWith, type EnvdCredentials, type EnvdSandbox, type EnvdSandboxes, type EnvdSignature } from "./envd/index.js";
import type { E2bTokens } from "./tokens.js";

/** Signed-URL lookups: how long the list of live sandboxes is used (a miss reads it again if it is older than the request). */
const LIVE_TTL_MS = 2_000;
/** Sandboxes tried between two yields to the event loop. */
const SEARCH_BATCH = 512;
/** Lookups waiting for the one running. */
const MAX_QUEUED = 32;
/** Signatures and tokens kept. */
const MAX_REMEMBERED = 50_000;

/**
 * Den's side of the envd seam: which sandbox a request may use. The sandbox's envd token
 * (or a signed URL made with it, or a Den key of its owner) is the only way in; a paused
 * sandbox wakes if it was made with autoResume, else it answers 502 like a dead one (the
 * guests' service's rule, GuestAccess.open, as are the commands' env, exec events and the
 * owners' stream bounds the opened sandbox offers).
 */
export class DenEnvdSandboxes implements EnvdSandboxes {
  constructor(private readonly cp: ControlPlane, private readonly tokens: E2bTokens) {}

  /** Signatures found, to the sandbox each was made for (a link fetched again costs one lookup). */
  private readonly signed = new Map<string, string>();
  /** Envd tokens by sandbox id (an HMAC each; kept so a search costs one hash per sandbox). */
  private readonly envdTokens = new Map<string, string>();
  /** The ids a search goes through, and when they were read. */
  private live: { at: number; ids: string[] } | undefined;
  /** Searches run one at a time; more than MAX_QUEUED waiting are refused. */
  private searching: Promise<unknown> = Promise.resolve();
  private queued = 0;

  /**
   * The sandbox a signed `/files` URL was made for, when it names none (the client builds
   * such URLs on E2B_SANDBOX_URL with no id in them). A signature is the sha256 of the
   * request's parts and the sandbox's envd token, so the only way from one to its sandbox is
   * to try each live sandbox's token: one hash each (the tokens are kept), malformed and
   * expired signatures refused before any, a found one remembered, one search at a time,
   * yielding between batches. A URL that names its sandbox never searches.
   */
  async bySignature(s: EnvdSignature): Promise<string | undefined> {
    const digest = signatureDigest(s.value);
    if (!digest || (s.expiration !== undefined && s.expiration * 1000 < Date.now())) return undefined;
    const known = this.signed.get(s.value);
    if (known) return known;
    if (this.queued >= MAX_QUEUED) throw new DenError("limit_exceeded", "too many signed URLs to look up at once; name the sandbox (E2b-Sandbox-Id) or retry");
    this.queued++;
    const asked = Date.now();
    const run = this.searching.then(() => this.search(s, digest, asked)).finally(() => this.queued--);
    this.searching = run.catch(() => undefined);
    return run;
  }

  private async search(s: EnvdSignature, digest: Buffer, asked: number): Promise<string | undefined> {
    const tried = new Set<string>();
    for (let pass = 0; pass < 2; pass++) {
      // A second pass, over the sandboxes made since the list was read, when it is older than the request.
      if (pass === 1 && this.live && this.live.at >= asked) break;
      if (!this.live || pass === 1 || Date.now() - this.live.at > LIVE_TTL_MS) this.live = { at: Date.now(), ids: await this.cp.reads.liveIds() };
      let n = 0;
      for (const id of this.live.ids) {
        if (tried.has(id)) continue;
        tried.add(id);
        if (++n % SEARCH_BATCH === 0) await new Promise((r) => setImmediate(r));
        if (signedWith(this.envdToken(id), s, digest)) {
          if (this.signed.size >= MAX_REMEMBERED) this.signed.delete(this.signed.keys().next().value!);
          this.signed.set(s.value, id);
          return id;
        }
      }
    }
    return undefined;
  }

  private envdToken(id: string): string {
    let t = this.envdTokens.get(id);
    if (!t) {
      if (this.envdTokens.size >= MAX_REMEMBERED) this.envdTokens.clear();
      this.envdTokens.set(id, (t = this.tokens.envd(id)));
    }
    return t;
  }

  async open(sandboxId: string, credentials: EnvdCredentials, opts: { probe?: boolean } = {}): Promise<EnvdSandbox> {
    const found = await this.cp.sandbox(sandboxId);
    if (!found) throw new EnvdUnavailable(`sandbox ${JSON.stringify(sandboxId.slice(0, 64))} does not exist`);
    await checkCredentials(credentials, this.tokens.envd(found.id), (key) => this.cp.keys.isOwners(key, found.owner));
    // The wake policy is the guests' service's (E2B's pause: autoResume wakes for traffic, not for a probe).
    const row = await this.cp.guests.open(found, opts).catch((e: unknown) => {
      throw e instanceof DenError && e.code === "sandbox_not_running" ? new EnvdUnavailable(e.message) : e;
    });
    const guests = this.cp.guests;
    const id = row.id;
    const defaults = guests.commandDefaults(row);
    const quiet = (p: Promise<void>) => p.catch(() => undefined);
    return {
      guest: guests.peek(row),
      env: defaults.env,
      ...(defaults.user ? { user: defaults.user } : {}),
      command: (call) => guests.command(row, call),
      execStarted: (cmd, info) => quiet(guests.execStarted(id, cmd, { surface: "envd", pid: info.pid })),
      execEnded: (exit, info) => quiet(guests.execEnded(id, exit, { surface: "envd", pid: info.pid })),
      hold: (kind) => (kind === "watch" ? guests.slots.follows : guests.slots.streams).take(row.owner),
      touch: () => void guests.touch(id).catch(() => undefined),
      onGone: (cb) => this.cp.ops.onGone(id, cb),
    };
  }
}
