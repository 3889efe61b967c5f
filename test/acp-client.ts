// Drives the built daemon as a child process with the real ACP SDK client, over stdio or its socket.
// Shared by the tests and the demo.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { connect as netConnect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Duplex, Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { z } from "zod";
import { afterEach, beforeAll, beforeEach, onTestFailed } from "vitest";
import { assertBuilt, MAIN } from "./fixtures/built.js";
import { startModelServer, type ModelServer } from "./model-server.js";
import type { ClientContext, SessionNotification } from "@agentclientprotocol/sdk";

export function tempDir(prefix = "lnk-acp-"): { path: string; remove(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/** Writes the agent's settings through the daemon's own `configure`. */
export function configure(agentDir: string, settings: unknown): void {
  const run = spawnSync(process.execPath, [MAIN, "configure", "--agent", agentDir], { input: JSON.stringify(settings), encoding: "utf8" });
  if (run.status !== 0) throw new Error(`configure failed: ${run.stderr}`);
}

/** Settings for an agent whose model is the scripted server at `url`. */
export function scriptedSettings(url: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: { provider: "scripted", name: "scripted-model", base_url: url }, ...extra };
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Daemon {
  readonly child: ChildProcess;
  /** Everything it wrote on stderr so far. */
  stderr(): string;
  readonly exited: Promise<Exit>;
  /** Resolves once a line on stderr matches. */
  waitForLog(pattern: RegExp): Promise<string>;
  /** Sends a signal (SIGTERM by default) and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<Exit>;
}

/**
 * The daemon as a child process: the built bin, or `bin` (a copy of the build, say). `via` is a
 * command line it is started through, given the daemon's own as its arguments (a shell that sets
 * the umask first, say).
 */
export function startDaemon(args: string[], env: NodeJS.ProcessEnv = {}, o: { bin?: string; via?: string[] } = {}): Daemon {
  const [command, ...before] = [...(o.via ?? []), process.execPath];
  return watchDaemon(spawn(command as string, [...before, o.bin ?? MAIN, ...args], { env: { ...process.env, ...env }, stdio: ["pipe", "pipe", "pipe"] }));
}

/** A daemon started another way (under `sh -c 'ulimit …'`, say), with its stdio piped: watched as startDaemon's are. */
export function watchDaemon(child: ChildProcess): Daemon {
  let err = "";
  const watchers: { pattern: RegExp; resolve: (line: string) => void }[] = [];
  child.stderr?.setEncoding("utf8").on("data", (d: string) => {
    err += d;
    for (const w of [...watchers]) {
      const line = err.split("\n").find((l) => w.pattern.test(l));
      if (line !== undefined) {
        watchers.splice(watchers.indexOf(w), 1);
        w.resolve(line);
      }
    }
  });
  const exited = new Promise<Exit>((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  return {
    child,
    stderr: () => err,
    exited,
    waitForLog: (pattern) => {
      const line = err.split("\n").find((l) => pattern.test(l));
      if (line !== undefined) return Promise.resolve(line);
      return new Promise((resolve, reject) => {
        watchers.push({ pattern, resolve });
        void exited.then((e) => reject(new Error(`daemon exited (${e.code ?? e.signal}) before logging ${pattern}: ${err}`)));
      });
    },
    stop: (signal = "SIGTERM") => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

export function stdioStream(child: ChildProcess): acp.Stream {
  if (!child.stdin || !child.stdout) throw new Error("the daemon has no stdio pipes");
  return acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout) as ReadableStream<Uint8Array>);
}

export async function socketStream(path: string): Promise<{ stream: acp.Stream; socket: Socket }> {
  const socket = netConnect(path);
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  const { readable, writable } = Duplex.toWeb(socket);
  return { stream: acp.ndJsonStream(writable, readable as ReadableStream<Uint8Array>), socket };
}

export interface Client {
  readonly agent: ClientContext;
  /** Every session/update received, in order. */
  readonly updates: SessionNotification[];
  /** Resolves once an update for which `pick` is true has arrived. */
  waitForUpdate(pick: (n: SessionNotification) => boolean): Promise<SessionNotification>;
  close(): void;
  readonly closed: Promise<void>;
}

/** Connects the ACP SDK's client and initializes; `onUpdate` sees each update as it arrives. */
export async function openClient(stream: acp.Stream, onUpdate?: (n: SessionNotification) => void): Promise<Client> {
  const updates: SessionNotification[] = [];
  const waiters: { pick: (n: SessionNotification) => boolean; resolve: (n: SessionNotification) => void }[] = [];
  const connection = acp
    .client({ name: "test-client" })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      updates.push(params);
      onUpdate?.(params);
      for (const w of [...waiters]) {
        if (w.pick(params)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(params);
        }
      }
    })
    .connect(stream);
  await connection.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
  return {
    agent: connection.agent,
    updates,
    waitForUpdate: (pick) => {
      const got = updates.find(pick);
      if (got) return Promise.resolve(got);
      return new Promise((resolve) => waiters.push({ pick, resolve }));
    },
    close: () => connection.close(),
    closed: connection.closed,
  };
}

/** The text of the agent_message_chunks among the updates. */
export function answerText(updates: readonly SessionNotification[], sessionId?: string): string {
  return updates
    .filter((n) => sessionId === undefined || n.sessionId === sessionId)
    .map((n) => (n.update.sessionUpdate === "agent_message_chunk" && n.update.content.type === "text" ? n.update.content.text : ""))
    .join("");
}

/**
 * The hooks every test of the built daemon shares: the build checked first, a fresh scripted model
 * server for each test (handed to `use`), and what each test pushes onto the returned list undone
 * after it, last first.
 */
export function daemonTestHooks(outputs: string[], use: (server: ModelServer) => void): (() => unknown)[] {
  const cleanup: (() => unknown)[] = [];
  beforeAll(() => {
    assertBuilt(outputs, ["acp", "daemon", "turn", "store", "protocol"]);
  });
  beforeEach(async () => {
    const server = await startModelServer();
    use(server);
    cleanup.push(() => server.close());
  });
  afterEach(async () => {
    for (const f of cleanup.splice(0).reverse()) await f();
  });
  return cleanup;
}

/**
 * Waits until a conversation's lock is let go: a turn answers once its events are on disk, and makes
 * its derived files (the copy, the mark) after, still under its lock.
 */
export async function lockFreed(lock: string, ms = 10_000): Promise<void> {
  await until(() => !existsSync(lock), `${lock} let go`, ms);
}

/** Waits until `check` holds, looking every few ms; throws naming `what` after `ms`. */
export async function until(check: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`not ${what} after ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** The error a request was answered with; throws when it was answered with a result. */
export async function failure(p: Promise<unknown>): Promise<{ code: number; message: string }> {
  try {
    await p;
  } catch (e) {
    return e as { code: number; message: string };
  }
  throw new Error("expected the request to fail");
}

/** Stops the daemon once the test is over (pushed onto `cleanup`), and prints its log should the test fail. */
export function watched(d: Daemon, cleanup: (() => unknown)[]): Daemon {
  cleanup.push(() => d.stop("SIGKILL"));
  onTestFailed(() => void process.stderr.write(`the daemon's log:\n${d.stderr()}\n`));
  return d;
}

/** The ACP SDK client on the daemon's stdio, closed once the test is over. */
export async function stdioClient(d: Daemon, cleanup: (() => unknown)[]): Promise<Client> {
  const c = await openClient(stdioStream(d.child));
  cleanup.push(() => c.close());
  return c;
}

/** A daemon of the agent in `dir` on stdio, watched, the ACP SDK client on it, and a new session with `cwd`. */
export async function stdioSession(dir: string, cleanup: (() => unknown)[], cwd = dir): Promise<{ d: Daemon; c: Client; sessionId: string }> {
  const d = watched(startDaemon(["--agent", dir]), cleanup);
  const c = await stdioClient(d, cleanup);
  const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd, mcpServers: [] });
  return { d, c, sessionId };
}

/** An ACP stream over a TCP connection to 127.0.0.1:`port` (the daemon's port endpoint). */
export async function portStream(port: number, host = "127.0.0.1"): Promise<{ stream: acp.Stream; socket: Socket }> {
  const socket = netConnect({ port, host });
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  const { readable, writable } = Duplex.toWeb(socket);
  return { stream: acp.ndJsonStream(writable, readable as ReadableStream<Uint8Array>), socket };
}

/** The port a daemon says it serves on: its "serving ACP" line with a port, and matching `also` when given. */
export async function servedPort(d: Daemon, also = /./): Promise<number> {
  const line = await d.waitForLog(new RegExp(`"serving ACP".*"port":\\d+.*${also.source}|${also.source}.*"serving ACP".*"port":\\d+`));
  return z.object({ port: z.number() }).loose().parse(JSON.parse(line)).port;
}
