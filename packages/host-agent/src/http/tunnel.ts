import http from "node:http";
import type { Duplex } from "node:stream";
import type { HostGuest } from "@den/protocol";
import { asDenError, errorBody } from "./wire-errors.js";

/** Answers an upgrade that cannot be served with the error as a plain HTTP response. */
export function refuseUpgrade(socket: Duplex, e: unknown): void {
  const err = asDenError(e);
  const body = JSON.stringify(errorBody(err));
  socket.end(`HTTP/1.1 ${err.status} ${http.STATUS_CODES[err.status] ?? "Error"}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

/**
 * `Upgrade: den-tcp` on `/host/v1/sandboxes/:id/tunnel/:port`: the connection is spliced
 * byte for byte to a TCP connection to the port on the guest's loopback (flow-controlled
 * by pipe on both sides, as the port proxy does).
 */
export async function serveTunnel(socket: Duplex, head: Buffer, guest: () => HostGuest, port: number): Promise<void> {
  socket.on("error", () => undefined);
  let tunnel: Duplex;
  try {
    tunnel = await guest().tunnel(port);
  } catch (e) {
    refuseUpgrade(socket, e);
    return;
  }
  tunnel.on("error", () => socket.destroy());
  socket.write("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: den-tcp\r\n\r\n");
  if (head.length) tunnel.write(head);
  socket.pipe(tunnel);
  tunnel.pipe(socket);
  socket.on("close", () => tunnel.destroy());
  tunnel.on("close", () => socket.destroy());
}
