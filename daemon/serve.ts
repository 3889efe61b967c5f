// Serving ACP on stdio, on a Unix control socket or a loopback port shared by many connections at
// once, for one agent or several (--agents), or for the agent a Bind names (--blank). This path
// loads nothing heavy: each connection's first request, initialize, is answered by its front, and
// the agent (the ACP SDK, the schemas, the sessions) is loaded right after.
import type { Server, Socket } from "node:net";
import { Readable, Writable } from "node:stream";
import { lazy } from "../turn/load.js";
import type { Settings } from "../protocol/settings.js";
import type { AgentRef } from "../store/paths.js";
import type { Gate } from "../acp/link.js";
import type { RunningAgent } from "./agent.js";
import { agentCode } from "./bundle.js";
import { UsageError, agentRef, type Command } from "./cli.js";
import { DEFAULT_UNREAD_MS, front, type MessageSink, type WebOutput } from "./front.js";
import { checkAgent } from "./check.js";
import { captureConsole, log } from "./log.js";
import { listenPort } from "./port.js";
import { listenSocket, type ControlSocket } from "./socket.js";
import { version } from "./version.js";

/** The ACP SDK's own default bound on a message: 32 MiB. */
export const DEFAULT_MAX_BYTES = 32 * 1024 * 1024;
/** How long the agent waits to load when no request comes first. */
const LOAD_AFTER_MS = 100;
/** The most port connections that have not proved themselves at once, and how long one has to. */
export const UNPROVED_MAX = 64;
export const PROOF_MS = 10_000;
/** How long a connection waits before each new attempt to load the agent: a moment of EMFILE passes. */
const LOAD_AGAIN_MS = [100, 500, 2_000];

/** The agent could not be loaded for a connection, after every attempt. */
class AgentUnavailable extends Error {
  constructor(cause: unknown) {
    super(`the agent could not be loaded: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.name = "AgentUnavailable";
  }
}

/** The longest a timer can wait: Node takes a longer one as 1 ms. */
const TIMER_MAX_MS = 2_147_483_647;

/** A whole number the environment sets, at least `least` and at most `most`; `fallback` when it is unset or empty. */
function wholeFrom(env: NodeJS.ProcessEnv, name: string, fallback: number, least: number, unit: string, most = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw.trim());
  if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(n) || n < least || n > most) {
    throw new UsageError(`${name} must be a whole number of ${unit}, at least ${least}${most < Number.MAX_SAFE_INTEGER ? ` and at most ${most}` : ""}`);
  }
  return n;
}

/**
 * What a connection is held to: the largest message read (LNK_ACP_MAX_BYTES), how long its output may
 * go unread (LNK_ACP_UNREAD_MS), and how long a port's connection has to prove itself (LNK_ACP_PROOF_MS).
 */
export interface Bounds {
  max: number;
  unreadMs: number;
  proofMs?: number;
}

function boundsFrom(env: NodeJS.ProcessEnv): Bounds {
  return {
    max: wholeFrom(env, "LNK_ACP_MAX_BYTES", DEFAULT_MAX_BYTES, 1024, "bytes"),
    unreadMs: wholeFrom(env, "LNK_ACP_UNREAD_MS", DEFAULT_UNREAD_MS, 1000, "milliseconds", TIMER_MAX_MS),
    proofMs: wholeFrom(env, "LNK_ACP_PROOF_MS", PROOF_MS, 1000, "milliseconds", TIMER_MAX_MS),
  };
}

export interface AgentSpec {
  agent: AgentRef;
  /** Its environment: its tools and its key; left out, the process's. */
  env?: NodeJS.ProcessEnv;
  /** The names a request may give it in `_meta.link.agent`; left out, its folder's name. */
  names?: readonly string[];
  /** Its key, for the proof (a Bind's); left out, LNK_KEY of its environment. */
  key?: string;
  /** Settings held in memory (a Bind's). */
  settings?: () => Settings;
  /** Its name on each line it logs (one of several, --agents). */
  logAs?: string;
}

/** The agent's code, one copy for the process: every agent's and a blank process's warm-up. */
const agentModule = agentCode();

/** An agent of this process: loaded when a connection first needs it (or a moment after the start). */
/** How long a connection served to its end may take to send what is still written, once ended, before it is cut. */
const END_MS = 10_000;

/**
 * Ends a connection served to its end: what was written to it, the last answers too (corked for the
 * event loop's pass), goes out before its end, where destroying it dropped them; one whose client
 * takes none of it is cut after END_MS.
 */
function endWhenWritten(socket: Socket): void {
  if (socket.destroyed) return;
  const cut = setTimeout(() => socket.destroy(), END_MS);
  cut.unref();
  socket.once("close", () => clearTimeout(cut));
  socket.end();
}

export class Served {
  private readonly started: () => Promise<RunningAgent>;
  private loading: Promise<RunningAgent> | undefined;
  stopping = false;
  /** Whether its load ahead of any request was planned. */
  ahead = false;
  /** Taken back before it was served (a Bind refused once an endpoint was made): never loaded. */
  dropped = false;

  constructor(
    readonly spec: AgentSpec,
    version: string,
    max: number,
  ) {
    // A load that failed (a moment of EMFILE, say) is tried again, never kept.
    this.started = lazy(async () => {
      const running = (await agentModule()).startAgent({ ...spec, version, max });
      log.info("agent loaded", { agent: spec.names?.[0] ?? spec.agent.dir });
      return running;
    });
  }

  load(): Promise<RunningAgent> {
    // Loaded, a refused Bind's agent would hold its key and settings for the life of the process.
    if (this.dropped) return Promise.reject(new Error("the agent was taken back before it was served"));
    return (this.loading = this.started());
  }

  /** The agent for a connection: loaded, or loaded again after a short wait, a few times. */
  async loadFor(): Promise<RunningAgent> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.load();
      } catch (e) {
        const wait = LOAD_AGAIN_MS[attempt];
        if (wait === undefined || this.stopping) throw new AgentUnavailable(e);
        log.warn("loading the agent failed: trying again", { error: (e as Error).message, ms: wait });
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  async stop(abort: boolean): Promise<void> {
    this.stopping = true;
    await (await this.loading?.catch(() => undefined))?.stop(abort);
  }
}

/** Node's web stream over a connection's output (stdout, a socket), made when the SDK first writes bytes. */
const webOf =
  (output: Writable): WebOutput =>
  () => Writable.toWeb(output);

/**
 * Serves one connection: its front answers its first line (an initialize, at once), then the
 * target takes the rest through `web`; `first` runs once that line is read.
 */
function serveConnection(input: Readable, output: Writable, web: WebOutput, target: Target, o: { version: string; bounds: Bounds; gate?: Gate; first?: () => void; pendingMax?: number }): Promise<void> {
  const c = front(input, output, web, o.version, o.bounds.max, o.bounds.unreadMs, o.gate, o.pendingMax);
  return c.first.then(() => {
    o.first?.();
    return target(c.input, c.output, o.gate, c.send);
  });
}

/** Serves one connection over a pair of Node streams as stdio is served: its front, Node's web streams over them, the target. */
export function serveStreams(input: Readable, output: Writable, target: Target, version: string, bounds: Bounds): Promise<void> {
  return serveConnection(input, output, webOf(output), target, { version, bounds });
}

/** Serves a connection, its first request answered by its front: gated on a port endpoint. */
export type Target = (input: ReadableStream<Uint8Array>, output: WritableStream<Uint8Array>, gate: Gate | undefined, send?: MessageSink) => Promise<void>;

/** What a serving process holds: its agents, its endpoints and its connections, and how it stops. */
export class Process {
  readonly agents: Served[] = [];
  /** The agent's code (modules loaded later, as blank.ts is, reach it here: they hold their own copy of this one). */
  readonly agentCode = agentModule;
  private readonly connections = new Set<Socket>();
  private readonly servers: Server[] = [];
  private readonly sockets: ControlSocket[] = [];
  private readonly timers: NodeJS.Timeout[] = [];
  private stopping: Promise<void> | undefined;
  /** Port connections that have not proved themselves yet (unproved). */
  private unprovedNow = 0;
  private unprovedWarned = false;
  exitCode = 0;
  private stopped!: () => void;
  readonly done = new Promise<void>((resolve) => (this.stopped = resolve));

  constructor(
    readonly version: string,
    readonly bounds: Bounds,
  ) {
    // A daemon outlives any one failure: whatever escapes a handler is logged, never fatal.
    process.on("unhandledRejection", (e) => log.error("unhandled rejection", { error: e instanceof Error ? e.message : String(e) }));
    // Kept for the process's life (not `once`): a module that re-raises a signal when no other
    // listener is left (signal-exit, under proper-lockfile) would otherwise kill the daemon mid-stop.
    let signals = 0;
    const onSignal = (signal: NodeJS.Signals) => {
      signals += 1;
      if (signals > 1) {
        log.warn("stopping at once", { signal });
        process.exit(1);
      }
      log.info("stopping", { signal });
      void this.stop(true);
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
  }

  /** Adds an agent, loaded a moment after an endpoint serves it, unless a connection asks for it first. */
  add(spec: AgentSpec): Served {
    const served = new Served(spec, this.version, this.bounds.max);
    this.agents.push(served);
    return served;
  }

  /** The agents added and not yet loading begin to load a moment from now: an endpoint serves them. */
  private loadAhead(): void {
    for (const served of this.agents) {
      if (served.ahead) continue;
      served.ahead = true;
      // One dropped meanwhile (its Bind refused by its next endpoint) is let go, not loaded.
      const loadNow = () => {
        if (!served.dropped) void served.load().catch((e: unknown) => log.warn("loading the agent failed: the next connection tries again", { error: (e as Error).message }));
      };
      this.timers.push(setTimeout(loadNow, LOAD_AFTER_MS));
    }
  }

  /** The target of a connection to one agent. */
  oneAgent(served: Served): Target {
    return async (input, output, gate, send) => (await served.loadFor()).connect(input, output, { ...(gate ? { gate } : {}), ...(send ? { send } : {}) });
  }

  /** Takes back an agent added but never served (a Bind whose endpoint could not be made). */
  drop(served: Served): void {
    const at = this.agents.indexOf(served);
    if (at >= 0) this.agents.splice(at, 1);
    served.stopping = true;
    served.dropped = true;
  }

  /** Undoes a start that failed, saying nothing: the failure is said once, by the caller. */
  abandon(): void {
    for (const t of this.timers) clearTimeout(t);
    for (const s of this.servers) s.close();
    for (const s of this.sockets) s.remove();
  }

  /** Stops taking work, lets (or makes) the running turns end, closes the tools and the endpoints. */
  stop(abort: boolean): Promise<void> {
    return (this.stopping ??= (async () => {
      for (const t of this.timers) clearTimeout(t);
      for (const s of this.servers) s.close();
      await Promise.all(this.agents.map((a) => a.stop(abort)));
      for (const socket of this.connections) socket.destroy();
      for (const s of this.sockets) s.remove();
      log.info("stopped");
      this.stopped();
    })());
  }

  private serveFront(input: Readable, output: Writable, web: WebOutput, target: Target, gate: Gate | undefined, pendingMax?: number): Promise<void> {
    // A client came: its connection loads the agent it asks for, so the loads planned a moment from now are let go.
    const first = () => {
      for (const t of this.timers) clearTimeout(t);
    };
    return serveConnection(input, output, web, target, { version: this.version, bounds: this.bounds, ...(gate ? { gate } : {}), first, ...(pendingMax !== undefined ? { pendingMax } : {}) });
  }

  /**
   * Serves one connection over a pair of Node streams as stdio is served: its front, Node's web
   * streams over them, the target. A blank process's warm-up talks to its scratch agent this way,
   * so that the code a bound agent's first connection runs has run (Node compiles its web streams'
   * adapters on their first use: a millisecond of a Bind).
   */
  serveStreams(input: Readable, output: Writable, target: Target): Promise<void> {
    return serveStreams(input, output, target, this.version, this.bounds);
  }

  private onSocket(target: Target, gated: boolean) {
    return (socket: Socket) => {
      const gate = gated ? this.unproved(socket) : undefined;
      if (gated && !gate) return;
      this.connections.add(socket);
      socket.on("error", (e) => log.warn("connection error", { error: e.message }));
      socket.on("close", () => this.connections.delete(socket));
      const web = webOf(socket);
      void this.serveFront(socket, socket, web, target, gate).then(
        () => endWhenWritten(socket),
        (e: unknown) => {
          log[e instanceof AgentUnavailable ? "error" : "warn"]("connection ended", { error: (e as Error).message });
          socket.destroy();
        },
      );
    };
  }

  /**
   * A port connection's gate, until it has proved itself (or its agent holds no key to prove): at most
   * UNPROVED_MAX such connections at once (a new one past it is closed at once), each closed
   * unless proved within PROOF_MS (LNK_ACP_PROOF_MS), and its lines held to UNPROVED_LINE_MAX bytes meanwhile (the
   * front's). Anyone on the machine reaches the port: without these, idle or endless connections
   * held the process's memory and descriptors, and the owner's own socket failed for want of them.
   */
  private unproved(socket: Socket): Gate | undefined {
    if (this.unprovedNow >= UNPROVED_MAX) {
      if (!this.unprovedWarned) log.warn("connection refused: too many connections to the port have not proved themselves", { most: UNPROVED_MAX });
      this.unprovedWarned = true;
      socket.destroy();
      return undefined;
    }
    this.unprovedNow++;
    let counted = true;
    let proved = false;
    const done = () => {
      if (!counted) return;
      counted = false;
      this.unprovedNow--;
      this.unprovedWarned = false;
      clearTimeout(deadline);
    };
    const ms = this.bounds.proofMs ?? PROOF_MS;
    const deadline = setTimeout(() => {
      log.warn("connection closed: it did not prove itself in time", { ms });
      socket.destroy();
    }, ms);
    deadline.unref();
    socket.on("close", done);
    // Told by the connection once it has proved itself: it counts no more, whatever it does next.
    return {
      get proved() {
        return proved;
      },
      set proved(now: boolean) {
        proved = now;
        if (now) done();
      },
    };
  }

  /** A Unix socket of mode 0600 that is not ACP (--blank's control socket), removed when the process stops. */
  async serveControl(path: string, onConnection: (socket: Socket) => void): Promise<void> {
    const control = await listenSocket(path, (socket) => {
      this.connections.add(socket);
      socket.on("close", () => this.connections.delete(socket));
      onConnection(socket);
    });
    this.sockets.push(control);
    this.servers.push(control.server);
    control.server.on("error", (e) => log.error("control socket error", { error: e.message }));
  }

  /** How many endpoints it serves: what `closeSince` goes back to. */
  get endpoints(): number {
    return this.servers.length;
  }

  /** Closes the endpoints made since `count` were served (a start that failed half-way). */
  closeSince(count: number): void {
    for (const server of this.servers.splice(count)) {
      server.close();
      const at = this.sockets.findIndex((s) => s.server === server);
      if (at >= 0) this.sockets.splice(at, 1)[0]?.remove();
    }
  }

  /** ACP on a Unix socket, mode 0600: only its owner reaches it, so nothing is gated. */
  async serveSocket(path: string, target: Target, fields: Record<string, unknown>): Promise<void> {
    const control = await listenSocket(path, this.onSocket(target, false));
    this.sockets.push(control);
    this.servers.push(control.server);
    control.server.on("error", (e) => log.error("control socket error", { error: e.message }));
    log.info("serving ACP", { socket: path, ...fields });
    this.loadAhead();
  }

  /**
   * ACP on 127.0.0.1:`port`: anyone on the machine reaches it, so with a key a connection proves itself
   * first. `another`: what a port in use asks of whoever named it (by default, --port).
   */
  async servePort(port: number, target: Target, fields: Record<string, unknown>, another?: string): Promise<number> {
    const endpoint = await listenPort(port, this.onSocket(target, true), another);
    this.servers.push(endpoint.server);
    endpoint.server.on("error", (e) => log.error("port error", { error: e.message }));
    log.info("serving ACP", { port: endpoint.port, ...fields });
    this.loadAhead();
    return endpoint.port;
  }

  /**
   * ACP on stdio. With `last`, the process ends once the client goes away (its turns finished and
   * kept). `pendingMax`: the most requests read and not yet answered, where not the front's own.
   */
  serveStdio(target: Target, fields: Record<string, unknown>, last: boolean, pendingMax?: number): void {
    // A client that hangs up closes the pipe: not the daemon's failure.
    process.stdout.on("error", (e) => log.warn("stdout closed", { error: e.message }));
    log.info("serving ACP", { stdio: true, ...fields });
    this.loadAhead();
    void this.serveFront(process.stdin, process.stdout, webOf(process.stdout), target, undefined, pendingMax)
      .catch((e: unknown) => {
        // Its one connection can't be served: the daemon ends, and says so by its exit status.
        if (e instanceof AgentUnavailable && last) this.exitCode = 1;
        log[this.exitCode ? "error" : "warn"]("connection ended", { error: (e as Error).message });
      })
      .then(() => (last ? this.stop(false) : undefined));
  }
}

export async function serve(command: Extract<Command, { kind: "serve" }>): Promise<void> {
  const bounds = boundsFrom(process.env);
  if (command.agents) {
    captureConsole();
    const p = new Process(version(), bounds);
    // Loaded with the agent's code (its bundle), whose schemas it reads the file with.
    await (await p.agentCode()).serveShared(p, command.agents);
    await p.done;
    process.exit(p.exitCode);
  }
  if (command.blank) {
    captureConsole();
    const p = new Process(version(), bounds);
    // Loaded with the agent's code (its bundle), whose schemas it reads a Bind with.
    await (await p.agentCode()).serveBlank(p, command);
    await p.done;
    process.exit(p.exitCode);
  }
  checkAgent(command.agent.agent);
  captureConsole();
  const agent = agentRef(command.agent);
  const p = new Process(version(), bounds);
  const target = p.oneAgent(p.add({ agent }));
  try {
    if (command.socket) await p.serveSocket(command.socket, target, { agent: agent.dir });
    if (command.port !== undefined) await p.servePort(command.port, target, { agent: agent.dir });
  } catch (e) {
    p.abandon();
    throw e;
  }
  if (!command.socket && command.port === undefined) p.serveStdio(target, { agent: agent.dir }, true);
  await p.done;
  process.exit(p.exitCode);
}
