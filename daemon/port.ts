// The port endpoint: ACP on 127.0.0.1 only, newline-delimited JSON-RPC as on the Unix socket.
import { createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { isErrno } from "../store/errno.js";
import { ServeError } from "./socket.js";

/** Only the loopback interface: a port endpoint is never reachable from another machine. */
export const LOOPBACK = "127.0.0.1";

export interface PortEndpoint {
  readonly server: Server;
  /** The port listened on: the one asked for, or the one the system chose for 0. */
  readonly port: number;
}

/** Listens on 127.0.0.1:`port`; a port in use, or one this user may not take, is said as such. */
export async function listenPort(port: number, onConnection: (socket: Socket) => void, another = "choose another with --port"): Promise<PortEndpoint> {
  // Half open: a client that ends its side right after asking is still sent every answer (serve.ts ends the connection once they are).
  const server = createServer({ allowHalfOpen: true }, onConnection);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen({ port, host: LOOPBACK, exclusive: true }, () => {
        server.off("error", reject);
        resolve();
      });
    });
  } catch (e) {
    if (isErrno(e, "EADDRINUSE")) throw new ServeError(`port ${port} on ${LOOPBACK} is in use by another process: ${another}`);
    if (isErrno(e, "EACCES")) throw new ServeError(`port ${port} on ${LOOPBACK} may not be taken by this user: choose one above 1023`);
    throw new ServeError(`cannot listen on ${LOOPBACK}:${port}: ${(e as Error).message}`);
  }
  return { server, port: (server.address() as AddressInfo).port };
}
