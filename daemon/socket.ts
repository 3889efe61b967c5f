// The Unix control socket: created mode 0600, a stale one from a dead process replaced, a live one never taken.
import { chmodSync, lstatSync, unlinkSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { isErrno } from "../store/errno.js";

/** A serving failure the person starting the daemon must fix: one line on stderr, exit 2. */
export class ServeError extends Error {
  readonly exitCode = 2;
  constructor(message: string) {
    super(message);
    this.name = "ServeError";
  }
}

const PROBE_MS = 2000;

/** Whether a process answers on the socket at `path`. */
function answers(path: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const probe = connect(path);
    const done = (alive: boolean) => {
      clearTimeout(timer);
      probe.destroy();
      resolve(alive);
    };
    // A process that accepts but is too busy to finish connecting is still alive.
    const timer = setTimeout(() => done(true), PROBE_MS);
    probe.once("connect", () => done(true));
    probe.once("error", (e) => {
      if (isErrno(e, "ECONNREFUSED") || isErrno(e, "ENOENT")) return done(false);
      clearTimeout(timer);
      reject(new ServeError(`cannot tell whether ${path} is in use: ${e.message}`));
    });
  });
}

async function clearStale(path: string): Promise<void> {
  let st;
  try {
    st = lstatSync(path);
  } catch (e) {
    if (isErrno(e, "ENOENT")) return;
    throw new ServeError(`cannot use ${path}: ${(e as Error).message}`);
  }
  if (!st.isSocket()) throw new ServeError(`${path} exists and is not a socket: not replaced`);
  if (await answers(path)) throw new ServeError(`${path} is in use by a running process: not taken`);
  unlinkSync(path);
}

export interface ControlSocket {
  readonly server: Server;
  /** Removes the socket file, if it is still this process's. */
  remove(): void;
}

/** Listens on `path` with mode 0600 from the start: the umask is narrowed while the socket is made. */
export async function listenSocket(path: string, onConnection: (socket: Socket) => void): Promise<ControlSocket> {
  await clearStale(path);
  const server = createServer(onConnection);
  const umask = process.umask(0o177);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(path, () => {
        server.off("error", reject);
        resolve();
      });
    });
  } catch (e) {
    if (isErrno(e, "EADDRINUSE")) throw new ServeError(`${path} is in use by a running process: not taken`);
    throw new ServeError(`cannot listen on ${path}: ${(e as Error).message}`);
  } finally {
    process.umask(umask);
  }
  chmodSync(path, 0o600);
  const ino = lstatSync(path).ino;
  return {
    server,
    remove() {
      try {
        if (lstatSync(path).ino === ino) unlinkSync(path);
      } catch {
        // already gone
      }
    },
  };
}
