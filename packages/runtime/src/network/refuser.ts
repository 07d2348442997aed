import net from "node:net";

/**
 * Where a sandbox's refused TCP connections are sent (the firewall rewrites their
 * destination to it): it accepts and resets at once. The user-mode router answers a
 * connect() that fails later, asynchronously, with a reset the guest's TCP ignores, so a
 * plain firewall reject would leave the guest's connect hanging until it times out; a
 * connection that is accepted and then reset fails at once on the guest side.
 */
export class Refuser {
  private constructor(private readonly server: net.Server, readonly address: string, readonly port: number) {}

  static async listen(address: string): Promise<Refuser> {
    const server = net.createServer({ pauseOnConnect: true }, (sock) => {
      sock.on("error", () => undefined);
      sock.resetAndDestroy();
    });
    server.on("error", () => undefined);
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen({ host: address, port: 0, backlog: 64 }, () => {
        server.off("error", reject);
        resolve();
      });
    });
    return new Refuser(server, address, (server.address() as net.AddressInfo).port);
  }

  close(): void {
    this.server.close();
  }
}
