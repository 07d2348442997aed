import net from "node:net";
import type { Command } from "commander";
import { Sandbox } from "@den/sdk";
import { logLine } from "./options.js";

/**
 * `den forward ID PORT [LOCALPORT]`: serves a sandbox's port on this machine, one tunnel
 * through the API per connection, until interrupted.
 */
export function registerForward(program: Command): void {
  program
    .command("forward")
    .description("serve a port of a sandbox on a local port (any TCP protocol), until Ctrl-C")
    .argument("<id>", "sandbox id")
    .argument("<port>", "the port inside the sandbox")
    .argument("[localport]", "the local port (default: the same number)")
    .option("--bind <address>", "local address to listen on", "127.0.0.1")
    .action(async (id: string, port: string, localPort: string | undefined, opts: { bind: string }) => {
      const sbx = await Sandbox.connect(id);
      const remote = Number(port);
      const open = new Set<net.Socket>();
      const server = net.createServer((client) => {
        open.add(client);
        client.on("close", () => open.delete(client));
        client.on("error", () => undefined);
        client.pause();
        sbx.connectPort(remote).then((tunnel) => {
          tunnel.on("error", () => client.destroy());
          client.on("close", () => tunnel.destroy());
          tunnel.on("close", () => client.destroy());
          client.pipe(tunnel);
          tunnel.pipe(client);
          client.resume();
        }, (e: Error) => {
          logLine(`den forward: ${e.message}`);
          client.destroy();
        });
      });
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(Number(localPort ?? port), opts.bind, () => resolve());
      });
      const addr = server.address() as net.AddressInfo;
      logLine(`forwarding ${addr.address}:${addr.port} -> ${id}:${remote} (Ctrl-C stops)`);
      await new Promise<void>((resolve) => {
        const stop = () => {
          server.close(() => resolve());
          for (const c of open) c.destroy();
        };
        process.once("SIGINT", stop);
        process.once("SIGTERM", stop);
      });
    });
}
