// The turn as a client sees it: the built daemon as a child process, driven over stdio by the ACP
// SDK client, against the scripted model behind a timing proxy that notes when each request reached
// the model and when the model's last byte left it. Per turn: the time before the request reached the
// model, after its last byte to the prompt's response, and the two together (the overhead); and spawn
// to the first answered prompt, each step. Beside each, its floor measured in the same run: the
// durable write the promise needs, a pass-through process that forwards the prompt to the model and
// the answer back with no disk, and Node's own start.
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, fsyncSync, linkSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, unlinkSync, writeSync } from "node:fs";
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { writeSettings } from "../../store/index.js";
import { MAIN, ROOT } from "../fixtures/built.js";
import { linkFreeEnv } from "../fixtures/env.js";
import type { ModelServer } from "../model-server.js";
import { benchSettings } from "./agent.js";
import { daemonNodeArgs } from "./daemon.js";
import { nodeStart } from "./start.js";
import { summarize, type Summary } from "./stats.js";

/** One exchange with the model, as the proxy saw it (performance.now() of this process). */
interface Exchange {
  /** The request's body had reached the proxy, so the model. */
  asked: number;
  /** The model's last byte had left the proxy. */
  answered: number;
}

/** A proxy in front of the model server that times each exchange; adds one local hop to both runs alike. */
class TimingProxy {
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

interface Driven {
  child: ChildProcess;
  client: acp.ClientContext;
  close(): Promise<void>;
}

/** A process spoken to over its stdio by the ACP SDK's client. */
function drive(command: string, args: string[]): Driven {
  const child = spawn(command, args, { env: linkFreeEnv(), stdio: ["pipe", "pipe", "ignore"] });
  if (!child.stdin || !child.stdout) throw new Error("no stdio pipes");
  const connection = acp
    .client({ name: "bench-client" })
    .onNotification(acp.methods.client.session.update, () => undefined)
    .connect(acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout) as ReadableStream<Uint8Array>));
  const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
  return {
    child,
    client: connection.agent,
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
   * The process's own time on a CPU, all its threads (V8's compilers and collector, the thread pool)
   * with the kernel's work for it, a steady turn (ms): where a turn's time goes when it is the work
   * of the process, and a measure the machine's other load moves far less than a wall time.
   */
  cpu?: number;
}

export interface ClientResult {
  turns: number;
  /** Turns 2 on of one session, through the daemon. */
  daemon: TurnSplit;
  /** The same turns through the pass-through: forwarded, no disk. */
  passThrough: TurnSplit;
  /** One small file written, fsynced, linked and its folder fsynced: the durable write an event needs (ms). */
  durableWrite: Summary;
  /** Spawn to each step answered, per run (ms, cumulative): initialize, session/new, first prompt. */
  spawn: { initialize: Summary; sessionNew: Summary; firstTurn: Summary };
  /** The first prompt alone (ms), and its overhead (less the model's time). */
  firstTurnOverhead: Summary;
  /** `node -e 0`, started in turn with the daemon. */
  nodeStart: Summary;
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

async function turns(d: Driven, proxy: TimingProxy, sessionId: string, n: number): Promise<TurnSplit> {
  const before: number[] = [];
  const after: number[] = [];
  const overhead: number[] = [];
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
    // The first turn warms the connection and the caches; steady turns are the rest.
    if (i === 0) continue;
    before.push(first.asked - t0);
    after.push(t1 - last.answered);
    overhead.push(t1 - t0 - mine.reduce((s, e) => s + (e.answered - e.asked), 0));
  }
  const cpuTo = cpuOf(d.child.pid);
  const cpu = cpuFrom !== undefined && cpuTo !== undefined && n > 1 ? (cpuTo - cpuFrom) / (n - 1) : undefined;
  return { before: summarize(before), after: summarize(after), overhead: summarize(overhead), ...(cpu !== undefined ? { cpu } : {}) };
}

/** The durable write an acknowledged event needs: written, fsynced, linked, its folder fsynced. */
function durableWrites(dir: string, n: number): Summary {
  const times: number[] = [];
  const text = `${JSON.stringify({ v: 1, kind: "message", role: "user", text: "x".repeat(120), time: new Date().toISOString() })}\n`;
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const tmp = join(dir, `.tmp-${i}`);
    const fd = openSync(tmp, "wx", 0o600);
    writeSync(fd, text);
    fsyncSync(fd);
    closeSync(fd);
    linkSync(tmp, join(dir, `${String(i).padStart(12, "0")}.json`));
    const dfd = openSync(dir, "r");
    fsyncSync(dfd);
    closeSync(dfd);
    times.push(performance.now() - t0);
    unlinkSync(tmp);
  }
  return summarize(times);
}

export async function measureClient(server: ModelServer, o: { turns: number; starts: number; log: (line: string) => void }): Promise<ClientResult> {
  const dir = mkdtempSync(join(tmpdir(), "lnk-link-harness-bench-client-"));
  const proxy = await TimingProxy.start(server.url);
  const fallback = server.fallback;
  server.fallback = () => ({ text: "A short answer, in a few chunks.", chunks: 4 });
  try {
    writeSettings({ dir }, benchSettings(proxy.url));
    o.log(`client: ${o.turns} turns through the daemon and the pass-through`);
    const daemon = drive(process.execPath, [...daemonNodeArgs(), MAIN, "--agent", dir]);
    let daemonSplit: TurnSplit;
    try {
      await daemon.client.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
      const { sessionId } = await daemon.client.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
      daemonSplit = await turns(daemon, proxy, sessionId, o.turns);
    } finally {
      await daemon.close();
    }
    const pass = drive(process.execPath, [join(ROOT, "dist", "test", "bench", "passthrough.js"), proxy.url]);
    let passSplit: TurnSplit;
    try {
      await pass.client.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
      passSplit = await turns(pass, proxy, "pass", o.turns);
    } finally {
      await pass.close();
    }
    const durableWrite = durableWrites(mkdtempSync(join(dir, "w-")), 50);

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
      daemon: daemonSplit,
      passThrough: passSplit,
      durableWrite,
      spawn: { initialize: summarize(init), sessionNew: summarize(made), firstTurn: summarize(first) },
      firstTurnOverhead: summarize(firstOverhead),
      nodeStart: summarize(bare.map((b) => b.median)),
    };
  } finally {
    server.fallback = fallback;
    await proxy.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
