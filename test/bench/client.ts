// The turn as a client sees it: the built daemon as a child process, driven over stdio by the ACP
// SDK client, against the scripted model behind a timing proxy that notes when each request reached
// the model and when the model's last byte left it. Per turn: the time before the request reached the
// model, after its last byte to the prompt's response, and the two together (the overhead); and spawn
// to the first answered prompt, each step. Beside each, its floor measured in the same run: the
// durable write the promise needs, a pass-through process that forwards the prompt to the model and
// the answer back with no disk, and Node's own start. The steady turns are measured in rounds, each a
// fresh daemon, a fresh pass-through and the durable write in turn (which goes first alternating), so
// that the machine's speed, which drifts over seconds here, moves a turn and its floor alike; the
// medians are of every round's turns together.
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, fsyncSync, linkSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, unlinkSync, writeSync } from "node:fs";
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import * as acp from "@agentclientprotocol/sdk";
import { writeSettings } from "../../store/index.js";
import { MAIN, ROOT } from "../fixtures/built.js";
import { linkFreeEnv } from "../fixtures/env.js";
import type { ModelServer } from "../model-server.js";
import { benchSettings } from "./agent.js";
import { daemonNodeArgs } from "./daemon.js";
import { Stamps, summarizeInside, turnsInside, type InsideSplit, type SeenTurn, type TurnInside } from "./inside.js";
import type { OpenClawResult } from "./openclaw.js";
import { onMachineClock, type Stamp } from "./stamps.js";
import { nodeStart } from "./start.js";
import { summarize, type Summary } from "./stats.js";
import type { TakeoverResult } from "./takeover.js";

/** One exchange with the model, as the proxy saw it (performance.now() of this process). */
interface Exchange {
  /** The request's body had reached the proxy, so the model. */
  asked: number;
  /** The model's last byte had left the proxy. */
  answered: number;
}

/** A proxy in front of the model server that times each exchange; adds one local hop to both runs alike. */
export class TimingProxy {
  private constructor(
    private readonly server: Server,
    readonly url: string,
    readonly exchanges: Exchange[],
  ) {}

  static async start(target: string): Promise<TimingProxy> {
    const to = new URL(target);
    const exchanges: Exchange[] = [];
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      const parts: Buffer[] = [];
      req.on("data", (c: Buffer) => parts.push(c));
      req.on("end", () => {
        const asked = performance.now();
        const body = Buffer.concat(parts);
        const out = request(
          { host: to.hostname, port: to.port, path: `${to.pathname.replace(/\/$/, "")}${req.url?.replace(/^\/v1/, "") ?? ""}`, method: req.method, headers: { ...req.headers, host: to.host } },
          (answer) => {
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.on("data", (c: Buffer) => res.write(c));
            answer.on("end", () => res.end(() => exchanges.push({ asked, answered: performance.now() })));
          },
        );
        out.on("error", () => res.destroy());
        out.end(body);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    return new TimingProxy(server, `http://127.0.0.1:${port}/v1`, exchanges);
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

export interface Driven {
  child: ChildProcess;
  client: acp.ClientContext;
  /** When this process last read what the process wrote (performance.now()). */
  lastRead(): number;
  close(): Promise<void>;
}

/** A process spoken to over its stdio by the ACP SDK's client, with `env` besides the bench's own. */
export function drive(command: string, args: string[], env: Record<string, string> = {}): Driven {
  const child = spawn(command, args, { env: { ...linkFreeEnv(), ...env }, stdio: ["pipe", "pipe", "ignore"] });
  if (!child.stdin || !child.stdout) throw new Error("no stdio pipes");
  // Heard beside the SDK's own reader, which takes each chunk as it is read all the same.
  let lastRead = 0;
  child.stdout.on("data", () => (lastRead = performance.now()));
  const connection = acp
    .client({ name: "bench-client" })
    .onNotification(acp.methods.client.session.update, () => undefined)
    .connect(acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout) as ReadableStream<Uint8Array>));
  const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
  return {
    child,
    client: connection.agent,
    lastRead: () => lastRead,
    close: async () => {
      // Its client gone, the daemon ends by itself (and writes its profile, when asked for one).
      connection.close();
      child.stdin?.end();
      const late = setTimeout(() => child.kill("SIGTERM"), 5_000);
      await exited;
      clearTimeout(late);
    },
  };
}

export interface TurnSplit {
  /** The client's send to the request reaching the model (ms). */
  before: Summary;
  /** The model's last byte to the prompt's response reaching the client (ms). */
  after: Summary;
  /** The client's wall time less the model's (ms). */
  overhead: Summary;
  /**
   * Of the time after the model's last byte, the client's own: from its last read of what the
   * process wrote to the prompt's response in its hands (ms), the SDK reading and checking each
   * message of that read (absent from runs before it was measured).
   */
  client?: Summary;
  /**
   * The process's own time on a CPU, all its threads (V8's compilers and collector, the thread pool)
   * with the kernel's work for it, a steady turn (ms): where a turn's time goes when it is the work
   * of the process, and a measure the machine's other load moves far less than a wall time.
   */
  cpu?: number;
}

/** One round of steady turns: each a median of its turns 2 on (ms), and the daemon's to its floor. */
export interface ClientRound {
  daemon: number;
  passThrough: number;
  durableWrite: number;
  /** daemon / (durableWrite + passThrough). */
  ratio: number;
}

export interface ClientResult {
  turns: number;
  /** Turns 2 on of one session a round, through the daemon, every round's together. */
  daemon: TurnSplit;
  /** The same turns through the pass-through: forwarded, no disk. */
  passThrough: TurnSplit;
  /** One small file written, fsynced, linked and its folder fsynced: the durable write an event needs (ms). */
  durableWrite: Summary;
  /** Each round's own medians and ratio (absent from runs before rounds were measured). */
  rounds?: ClientRound[];
  /** Spawn to each step answered, per run (ms, cumulative): initialize, session/new, first prompt. */
  spawn: { initialize: Summary; sessionNew: Summary; firstTurn: Summary };
  /** The first prompt alone (ms), and its overhead (less the model's time). */
  firstTurnOverhead: Summary;
  /** `node -e 0`, started in turn with the daemon. */
  nodeStart: Summary;
  /** This build's daemon in paired rounds with another's (`--against`), when asked for. */
  against?: AgainstResult;
  /** A new process's first turn of a long conversation, with its window's events file and without (absent from runs before it was measured). */
  takeover?: TakeoverResult;
  /**
   * The same steady turns in a pass of their own whose processes were stamped at their stdio and
   * sockets (stamps.ts): each turn's time before and after the model told apart into the ways to
   * and from the process and its own time (absent from runs before it was measured).
   */
  inside?: { processes: number; daemon: InsideSplit; passThrough: InsideSplit };
  /** OpenClaw's steady turns, run beside in the same run (`--openclaw`), or why they could not be. */
  openclaw?: OpenClawResult | { notMeasured: string };
  /** The steady turns by their age in a longer-lived process (absent from runs before it was measured). */
  ageing?: Ageing;
}

/**
 * Steady turns by how many a process has answered before them: processes of the daemon and of the
 * pass-through (alternating) run `turns` turns each, and each span of turn numbers is told apart.
 */
export interface Ageing {
  processes: number;
  turns: number;
  spans: AgeSpan[];
}

/** One span of turn numbers (from 1, both ends in it): overheads of every process's turns in it (ms). */
export interface AgeSpan {
  from: number;
  to: number;
  daemon: Summary;
  passThrough: Summary;
  /** daemon / (the rounds' durable write + passThrough), medians. */
  ratio: number;
}

/** A daemon's overhead to its floor: the durable write plus the pass-through's overhead. */
function floorRatio(daemon: number, durableWrite: number, passThrough: number): number {
  return daemon / (durableWrite + passThrough);
}

/** The spans of turn numbers an ageing run of `turns` turns tells apart: the rounds' own, then two later ones of as many turns. */
export function ageSpans(turns: number, first: number): { from: number; to: number }[] {
  const width = first - 1;
  const spans = [{ from: 2, to: first }];
  const middle = Math.floor(turns / 3);
  if (middle + 1 > first) spans.push({ from: middle + 1, to: middle + width });
  if (turns - width + 1 > (spans.at(-1)?.to ?? first)) spans.push({ from: turns - width + 1, to: turns });
  return spans;
}

/** Overheads of the turns numbered `from` to `to` (from 1) of each process's times (whose first entry is turn 2). */
function spanOf(all: readonly TurnTimes[], span: { from: number; to: number }): Summary {
  return summarize(all.flatMap((t) => t.overhead.slice(span.from - 2, span.to - 1)));
}

/** The time a process has been on a CPU so far, all its threads (ms), from /proc; undefined where there is none. */
function cpuOf(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    let ns = 0;
    for (const thread of readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${thread}/schedstat`, "utf8").split(" ")[0]);
      } catch {
        // A thread that ended meanwhile.
      }
    }
    return ns / 1e6;
  } catch {
    return undefined;
  }
}

/** What steady turns of one process measured: each turn's times (ms), and its CPU a turn. */
export interface TurnTimes {
  before: number[];
  after: number[];
  overhead: number[];
  client: number[];
  /** Each turn's times as the client and the proxy saw them (ms on the machine's clock: stamps.ts machineNow), the first too. */
  seen: SeenTurn[];
  cpu?: number;
}

export async function turns(d: Driven, proxy: TimingProxy, sessionId: string, n: number): Promise<TurnTimes> {
  const before: number[] = [];
  const after: number[] = [];
  const overhead: number[] = [];
  const client: number[] = [];
  const turnsSeen: SeenTurn[] = [];
  const epoch = onMachineClock;
  let cpuFrom: number | undefined;
  for (let i = 0; i < n; i++) {
    if (i === 1) cpuFrom = cpuOf(d.child.pid);
    const seen = proxy.exchanges.length;
    const t0 = performance.now();
    await d.client.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: `turn ${i}: say something short` }] });
    const t1 = performance.now();
    const mine = proxy.exchanges.slice(seen);
    const first = mine[0];
    const last = mine.at(-1);
    if (!first || !last) throw new Error("the turn never reached the model");
    turnsSeen.push({ sent: epoch(t0), asked: epoch(first.asked), answered: epoch(last.answered), done: epoch(t1) });
    // The first turn warms the connection and the caches; steady turns are the rest.
    if (i === 0) continue;
    before.push(first.asked - t0);
    after.push(t1 - last.answered);
    overhead.push(t1 - t0 - mine.reduce((s, e) => s + (e.answered - e.asked), 0));
    client.push(t1 - d.lastRead());
  }
  const cpuTo = cpuOf(d.child.pid);
  const cpu = cpuFrom !== undefined && cpuTo !== undefined && n > 1 ? (cpuTo - cpuFrom) / (n - 1) : undefined;
  return { before, after, overhead, client, seen: turnsSeen, ...(cpu !== undefined ? { cpu } : {}) };
}

/** The turns of every round together, and their CPU a turn (the rounds' mean). */
export function pooled(rounds: readonly TurnTimes[]): TurnSplit {
  const cpus = rounds.flatMap((r) => (r.cpu !== undefined ? [r.cpu] : []));
  return {
    before: summarize(rounds.flatMap((r) => r.before)),
    after: summarize(rounds.flatMap((r) => r.after)),
    overhead: summarize(rounds.flatMap((r) => r.overhead)),
    client: summarize(rounds.flatMap((r) => r.client)),
    ...(cpus.length ? { cpu: cpus.reduce((a, b) => a + b, 0) / cpus.length } : {}),
  };
}

/** Durable writes timed a round. */
const DURABLE_WRITES = 20;

/** The durable write an acknowledged event needs: written, fsynced, linked, its folder fsynced; numbered from `from`. */
function durableWrites(dir: string, n: number, from: number): number[] {
  const times: number[] = [];
  const text = `${JSON.stringify({ v: 1, kind: "message", role: "user", text: "x".repeat(120), time: new Date().toISOString() })}\n`;
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const tmp = join(dir, `.tmp-${from + i}`);
    const fd = openSync(tmp, "wx", 0o600);
    writeSync(fd, text);
    fsyncSync(fd);
    closeSync(fd);
    linkSync(tmp, join(dir, `${String(from + i).padStart(12, "0")}.json`));
    const dfd = openSync(dir, "r");
    fsyncSync(dfd);
    closeSync(dfd);
    times.push(performance.now() - t0);
    unlinkSync(tmp);
  }
  return times;
}

/** Steady turns of one fresh process of `args`, a session of its own (`newSession`: the daemon's). */
async function steady(args: string[], proxy: TimingProxy, dir: string, n: number, newSession: boolean, env?: Record<string, string>): Promise<TurnTimes> {
  const d = drive(process.execPath, args, env);
  try {
    await d.client.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    const sessionId = newSession ? (await d.client.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] })).sessionId : "pass";
    return await turns(d, proxy, sessionId, n);
  } finally {
    await d.close();
  }
}

/** The module that stamps a process the bench drives (stamps.ts), as `--import` takes it. */
const STAMPS = pathToFileURL(join(ROOT, "dist", "test", "bench", "stamps.js")).href;

/**
 * Steady turns of one fresh process of `args`, stamped (stamps.ts; its stamps written into `stamps`),
 * each told apart (inside.ts), turns 2 on.
 */
async function stampedTurns(args: string[], proxy: TimingProxy, dir: string, stamps: string, n: number, newSession: boolean): Promise<TurnInside[]> {
  const file = join(stamps, `stamps-${newSession ? "daemon" : "pass"}-${performance.now().toFixed(0)}.json`);
  const times = await steady(["--import", STAMPS, ...args], proxy, dir, n, newSession, { LNK_BENCH_STAMPS: file });
  let noted: Stamp[];
  try {
    noted = Stamps.parse(JSON.parse(readFileSync(file, "utf8")));
  } catch (e) {
    throw new Error(`a stamped process wrote no stamps (${file}): ${(e as Error).message}`, { cause: e });
  }
  return turnsInside(times.seen.slice(1), noted);
}

/**
 * An agent's folder whose model is `server` behind a timing proxy, answering short: `run` is given
 * both, and both go once it is done.
 */
export async function behindProxy<T>(server: ModelServer, name: string, run: (dir: string, proxy: TimingProxy) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), `lnk-link-harness-bench-${name}-`));
  const proxy = await TimingProxy.start(server.url);
  const fallback = server.fallback;
  server.fallback = () => ({ text: "A short answer, in a few chunks.", chunks: 4 });
  try {
    writeSettings({ dir }, benchSettings(proxy.url));
    return await run(dir, proxy);
  } finally {
    server.fallback = fallback;
    await proxy.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function measureClient(
  server: ModelServer,
  o: { turns: number; rounds: number; starts: number; stamped?: number; ageing?: { processes: number; turns: number }; log: (line: string) => void },
): Promise<ClientResult> {
  return behindProxy(server, "client", async (dir, proxy) => {
    o.log(`client: ${o.rounds} rounds of ${o.turns} turns through the daemon and the pass-through`);
    const daemonArgs = [...daemonNodeArgs(), MAIN, "--agent", dir];
    const passArgs = [join(ROOT, "dist", "test", "bench", "passthrough.js"), proxy.url];
    const writes = mkdtempSync(join(dir, "w-"));
    const daemonTurns: TurnTimes[] = [];
    const passTurns: TurnTimes[] = [];
    const durable: number[] = [];
    const rounds: ClientRound[] = [];
    // A round first that counts for nothing: this process's own client, proxy and model are code V8
    // is still compiling for their first hundred turns or so, which slowed the floor's turns (an
    // update for each read of the model's answer) more than the daemon's (two), and whichever ran
    // first more than the other.
    await steady(daemonArgs, proxy, dir, o.turns, true);
    await steady(passArgs, proxy, dir, o.turns, false);
    /** A process of each, of `turns` turns: which goes first alternates with `i`, so that neither always meets the machine as the other left it. */
    const both = async (i: number, turns: number): Promise<{ daemon: TurnTimes; passed: TurnTimes }> => {
      const pass = i % 2 === 1 ? await steady(passArgs, proxy, dir, turns, false) : undefined;
      const daemon = await steady(daemonArgs, proxy, dir, turns, true);
      return { daemon, passed: pass ?? (await steady(passArgs, proxy, dir, turns, false)) };
    };
    for (let r = 0; r < o.rounds; r++) {
      const { daemon, passed } = await both(r, o.turns);
      const written = durableWrites(writes, DURABLE_WRITES, r * DURABLE_WRITES);
      daemonTurns.push(daemon);
      passTurns.push(passed);
      durable.push(...written);
      const round = { daemon: summarize(daemon.overhead).median, passThrough: summarize(passed.overhead).median, durableWrite: summarize(written).median };
      rounds.push({ ...round, ratio: floorRatio(round.daemon, round.durableWrite, round.passThrough) });
    }

    // The stamped pass: a process of each a time, as in the rounds, each told apart turn by turn.
    const stamped = o.stamped ?? 0;
    const daemonInside: TurnInside[] = [];
    const passInside: TurnInside[] = [];
    if (stamped > 0) {
      o.log(`client: ${stamped} stamped processes of each, their own time told from the ways to and from them`);
      const stamps = mkdtempSync(join(dir, "s-"));
      for (let s = 0; s < stamped; s++) {
        daemonInside.push(...(await stampedTurns(daemonArgs, proxy, dir, stamps, o.turns, true)));
        passInside.push(...(await stampedTurns(passArgs, proxy, dir, stamps, o.turns, false)));
      }
    }

    // Older turns: V8 compiles a process's code further as it runs it, so its first turns run code
    // that a process of some hundred turns has compiled; told apart, no target.
    let ageing: Ageing | undefined;
    if (o.ageing && o.ageing.processes > 0 && o.ageing.turns > o.turns) {
      o.log(`client: ${o.ageing.processes} processes of each, ${o.ageing.turns} turns each, by the turns' age`);
      const daemons: TurnTimes[] = [];
      const passes: TurnTimes[] = [];
      for (let p = 0; p < o.ageing.processes; p++) {
        const { daemon, passed } = await both(p, o.ageing.turns);
        daemons.push(daemon);
        passes.push(passed);
      }
      const write = summarize(durable).median;
      const spans = ageSpans(o.ageing.turns, o.turns).map((s) => {
        const span = { ...s, daemon: spanOf(daemons, s), passThrough: spanOf(passes, s) };
        return { ...span, ratio: floorRatio(span.daemon.median, write, span.passThrough.median) };
      });
      ageing = { processes: o.ageing.processes, turns: o.ageing.turns, spans };
    }

    o.log(`client: spawn to first answer, ${o.starts} runs`);
    const init: number[] = [];
    const made: number[] = [];
    const first: number[] = [];
    const firstOverhead: number[] = [];
    const bare: Summary[] = [];
    for (let i = 0; i < o.starts; i++) {
      bare.push(await nodeStart(1));
      const t0 = performance.now();
      const d = drive(process.execPath, [...daemonNodeArgs(), MAIN, "--agent", dir]);
      try {
        await d.client.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
        init.push(performance.now() - t0);
        const { sessionId } = await d.client.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
        made.push(performance.now() - t0);
        const seen = proxy.exchanges.length;
        const asked = performance.now();
        await d.client.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "hello" }] });
        const done = performance.now();
        first.push(done - t0);
        firstOverhead.push(done - asked - proxy.exchanges.slice(seen).reduce((s, e) => s + (e.answered - e.asked), 0));
      } finally {
        await d.close();
      }
    }
    return {
      turns: o.turns,
      daemon: pooled(daemonTurns),
      passThrough: pooled(passTurns),
      durableWrite: summarize(durable),
      rounds,
      spawn: { initialize: summarize(init), sessionNew: summarize(made), firstTurn: summarize(first) },
      firstTurnOverhead: summarize(firstOverhead),
      nodeStart: summarize(bare.map((b) => b.median)),
      ...(stamped > 0 ? { inside: { processes: stamped, daemon: summarizeInside(daemonInside), passThrough: summarizeInside(passInside) } } : {}),
      ...(ageing ? { ageing } : {}),
    };
  });
}

/** One build's steady turns of a round: medians of its turns 2 on (ms). */
export interface RoundSplit {
  before: number;
  after: number;
  overhead: number;
}

/** This build's daemon and another's, in paired rounds (`--against`). */
export interface AgainstResult {
  /** The other build's daemon, as run. */
  other: string;
  turns: number;
  /** Each round's medians, of this build's daemon and of the other's, run one after the other. */
  rounds: { here: RoundSplit; there: RoundSplit }[];
}

/**
 * Steady turns of this build's daemon and of another's (`other`, its lnk-link-harness.cjs), in
 * paired rounds: each a fresh process of each, one right after the other, which goes first
 * alternating, against the same model behind the same proxy. A change to a turn moves it by tenths of a
 * millisecond, where this machine's disk moves a round's turns by more between minutes: two rounds
 * taken together meet it alike, so each round's difference says what the change did.
 */
export async function measureAgainst(server: ModelServer, other: string, o: { turns: number; rounds: number; log: (line: string) => void }): Promise<AgainstResult> {
  return behindProxy(server, "against", async (dir, proxy) => {
    o.log(`client: ${o.rounds} paired rounds of ${o.turns} turns, this build's daemon and ${other}`);
    const here = [...daemonNodeArgs(), MAIN, "--agent", dir];
    const there = [...daemonNodeArgs(), other, "--agent", dir];
    // A round of each first that counts for nothing, as in measureClient.
    await steady(here, proxy, dir, o.turns, true);
    await steady(there, proxy, dir, o.turns, true);
    const split = (t: TurnTimes): RoundSplit => ({ before: summarize(t.before).median, after: summarize(t.after).median, overhead: summarize(t.overhead).median });
    const rounds: AgainstResult["rounds"] = [];
    for (let r = 0; r < o.rounds; r++) {
      const first = r % 2 === 0 ? here : there;
      const second = first === here ? there : here;
      const a = await steady(first, proxy, dir, o.turns, true);
      const b = await steady(second, proxy, dir, o.turns, true);
      rounds.push(first === here ? { here: split(a), there: split(b) } : { here: split(b), there: split(a) });
    }
    return { other, turns: o.turns, rounds };
  });
}

/** What paired rounds say: each build's overhead (median of its rounds' medians), and per round, this build's less the other's. */
export function againstSummary(a: AgainstResult): { here: number; there: number; difference: number; lowerHere: number } {
  const differences = a.rounds.map((r) => r.here.overhead - r.there.overhead);
  return {
    here: summarize(a.rounds.map((r) => r.here.overhead)).median,
    there: summarize(a.rounds.map((r) => r.there.overhead)).median,
    difference: summarize(differences).median,
    lowerHere: differences.filter((d) => d < 0).length,
  };
}
