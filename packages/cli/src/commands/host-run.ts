import type { Command } from "commander";
import type { Registrar } from "@den/host-agent";
import { globalOptions, logLine, warnSurplusCapabilities } from "./options.js";
import { UsageError, configured } from "../output.js";

/**
 * `den host run`: this machine's host agent alone (its VMs, warm snapshots, templates and
 * networks in the data dir), serving /host/v1 to a control plane (`den serve --host-agent`).
 * The snapshot store is configured as for `den serve` (DEN_STORE, DEN_STORE_DIR, DEN_S3_*)
 * and must be the one the control plane opens. With `--control-plane URL` (one or more
 * replicas) it registers itself and keeps a lease by heartbeat; a stop then drains it (its
 * sandboxes cold-hibernate, to wake on other hosts) before it exits. `--memory`: an
 * in-memory host instead (MemoryHostAgent: no VM, no QEMU; its state kept in the data dir's
 * memory-host.json, so a restart finds its VMs as a real host's would), so a control plane in
 * another process can be tested without VMs.
 *
 * Every link is mutual TLS. Its identity: `--join TOKEN` the first time (a key made here, a
 * certificate from the control plane's hosts' listener, checked against the token's CA pin;
 * written to `--tls-dir`, default <data dir>/identity); later starts read it from there. A
 * host listed by URL (`den serve --host-agent https://...`, no --control-plane) cannot join:
 * its identity is `den ca issue --kind host --id <its instance id>` put in its tls dir (a
 * start without one says the instance id). It serves https to control planes of its CA only,
 * registers with their hosts' listeners (https, DEN_FLEET_PORT) by its certificate, and
 * renews that before it expires. DEN_HOST_SECRET, the shared secret of before, is retired:
 * still set, it stops the start.
 */
export function registerHostRun(host: Command): void {
  host
    .command("run")
    .description("run this machine's host agent alone, serving the host protocol to a control plane (mutual TLS: --join TOKEN once, or an identity from den ca issue)")
    .option("-p, --port <port>", "port (default 8788)", "8788")
    .option("--host <host>", "address to listen on (default 127.0.0.1)", "127.0.0.1")
    .option("--control-plane <url...>", "register with these control-plane replicas (all of them), keeping a lease; separated by commas or spaces, or the flag repeated (env DEN_CONTROL_PLANE_URL)")
    .option("--advertise <url>", "where the control plane reaches this host (https://...; default https://<host>:<port>)")
    .option("--memory", "an in-memory host: no VM and no QEMU, for tests of the control plane")
    .option("--join <token>", "join the fleet with a one-time token (den hosts token create): a certificate from the control plane's hosts' listener (--control-plane https://cp:8789), kept in --tls-dir")
    .option("--tls-dir <dir>", "this host's identity (key.pem, cert.pem, ca.pem) (env DEN_TLS_DIR; default <data dir>/identity)")
    .action(async (opts: { port: string; host: string; controlPlane?: string[]; advertise?: string; memory?: boolean; join?: string; tlsDir?: string }, cmd: Command) => {
      const { existsSync } = await import("node:fs");
      const { join: joinPath, resolve } = await import("node:path");
      const { privateFiles } = await import("@den/runtime");
      const { CertRenewer, LocalHostAgent, MemoryHostAgent, Registrar, joinFleet, startHostServer } = await import("@den/host-agent");
      const { ownIdentity, readMachineTls, writeIdentityFiles } = await import("@den/pki");
      const { checkUrls, loadConfig, openStore, refuseRetiredHostSecret, urlList } = await import("@den/server");
      // Everything it writes (database, snapshots, memory images, logs) is for root's eyes only.
      privateFiles();
      const root = cmd.optsWithGlobals<{ dataDir?: string }>();
      const dataDir = root.dataDir ? { dataDir: (await globalOptions(cmd)).dataDir } : {};
      // An old fleet's unit file (DEN_HOST_SECRET) stops the start, saying where the migration is described.
      const config = configured(() => (refuseRetiredHostSecret(process.env), loadConfig(dataDir)));
      const tlsDir = resolve(opts.tlsDir ?? process.env.DEN_TLS_DIR ?? joinPath(config.dataDir, "identity"));
      // (After loadConfig: its data dir is where the identity is kept by default.)
      const haveIdentity = existsSync(joinPath(tlsDir, "cert.pem"));
      // Commas or spaces, in the flag or the variable (a host should know every replica: one that knows one pauses its VMs when that one dies).
      const planes = urlList(opts.controlPlane?.length ? opts.controlPlane : process.env.DEN_CONTROL_PLANE_URL);
      checkUrls(planes, "a control plane");
      if (planes.some((u) => !u.startsWith("https://"))) throw new UsageError("the control planes are their hosts' listeners, over mutual TLS: --control-plane https://HOST:8789");
      if (opts.join && !haveIdentity && !planes.length) throw new UsageError("--join needs the control plane to join: --control-plane https://HOST:8789");
      // Checked before anything opens: the control planes refuse a plain http:// address.
      const advertised = opts.advertise ?? process.env.DEN_HOST_ADVERTISE_URL;
      if (planes.length && advertised && !advertised.startsWith("https://")) throw new UsageError(`the control plane reaches this host over mutual TLS: --advertise https://..., got ${advertised}`);
      const agent = opts.memory
        ? await MemoryHostAgent.open({ store: openStore(config), capacity: config.capacity, dataDir: config.dataDir })
        : (await warnSurplusCapabilities(), await LocalHostAgent.open(config.dataDir, openStore(config), config.capacity));
      let server;
      let tls: import("@den/pki").MachineTls | undefined;
      try {
        if (haveIdentity) {
          tls = readMachineTls(tlsDir);
        } else if (opts.join) {
          // The first start: a key made here, a certificate for this host's instance id, checked against the token's CA pin.
          let last: unknown;
          for (const url of planes) {
            try {
              tls = await joinFleet(url, opts.join, agent.instance);
              break;
            } catch (e) {
              last = e;
            }
          }
          if (!tls) throw new Error(`could not join the fleet: ${(last as Error).message}`);
          await writeIdentityFiles(tlsDir, { keyPem: tls.key, certPem: tls.cert, caPem: tls.ca });
          logLine(`den: joined the fleet as host ${agent.instance}; identity in ${tlsDir}`);
        } else {
          // Its instance id is known only now (the data dir is open), so the refusal says it: a listed host's certificate names it.
          throw new UsageError(`no identity in ${tlsDir}: this is host ${agent.instance}; on the CA's machine run \`den ca issue --kind host --id ${agent.instance} --out DIR\` and put DIR's key.pem, cert.pem and ca.pem in ${tlsDir} (or join: --join TOKEN --control-plane https://CP:8789)`);
        }
        const me = ownIdentity(tls);
        if (me.kind !== "host" || me.id !== agent.instance) throw new UsageError(`${tlsDir} holds the identity of ${me.kind} ${me.id}, not of this host (${agent.instance})`);
        server = await startHostServer(agent, { tls, port: Number(opts.port), host: opts.host, logger: { level: config.logLevel } });
      } catch (e) {
        agent.close();
        throw e;
      }
      logLine(`den: ${opts.memory ? "in-memory " : ""}host agent ${agent.instance} listening on ${server.url} (data dir ${config.dataDir})`);
      let registrar: Registrar | undefined;
      let renewer: InstanceType<typeof CertRenewer> | undefined;
      if (planes.length) {
        const address = (advertised ?? server.url).replace(/\/+$/, "");
        if (/^https?:\/\/(0\.0\.0\.0|\[::\])(:|$)/.test(address)) throw new UsageError(`listening on ${opts.host}: say where the control plane reaches this host with --advertise URL`);
        const link = (t: import("@den/pki").MachineTls) => ({ tls: t, peer: { kind: "control-plane" as const } });
        registrar = new Registrar(agent, { controlPlanes: planes, link: link(tls), address, intervalMs: Number(process.env.DEN_HOST_HEARTBEAT_MS ?? 2000), log: logLine });
        try {
          await registrar.start();
        } catch (e) {
          await server.close();
          agent.close();
          throw new Error(`could not register with the control plane (${planes.join(", ")}): ${(e as Error).message}`);
        }
        logLine(`den: registered with ${planes.join(", ")} as ${address}`);
        // Renewed before it expires: new connections (the control planes', and ours to them) take the new one; open ones keep theirs.
        const reg = registrar;
        const srv = server;
        renewer = new CertRenewer(tls, { controlPlanes: planes, dir: tlsDir, log: logLine, onRenew: (t) => (srv.reload(t), reg.setLink(link(t))) });
        renewer.start();
      }
      let stopping = false;
      // Registered: a stop drains the host first (its sandboxes go cold and can wake elsewhere).
      // Otherwise it leaves the VMs running: the next start adopts them.
      const stop = (signal: string) => {
        if (stopping) return;
        stopping = true;
        const drained = registrar
          ? (logLine(`den: ${signal}: draining (its sandboxes cold-hibernate to wake on other hosts)`), registrar.drain(config.defaults.shutdownTimeoutSeconds * 1000)
            .then((left) => logLine(left === 0 ? "den: drained" : `den: ${left} sandbox(es) still here after the shutdown timeout; they are adopted at the next start`)))
          : (logLine(`den: ${signal}: host agent stopping; its VMs keep running and are adopted at the next start`), Promise.resolve());
        drained.finally(() => {
          registrar?.stop();
          renewer?.stop();
          // A connection that does not let go (a stream to a guest) does not hold the stop up for long.
          setTimeout(() => process.exit(0), 10_000).unref();
          // The runtime's close resolves once its pool's QEMUs and its empty cgroups are gone: exiting first left them behind.
          server.close().finally(async () => {
            await agent.close();
            process.exit(0);
          });
        });
      };
      process.on("SIGTERM", () => stop("SIGTERM"));
      process.on("SIGINT", () => stop("SIGINT"));
    });
}
