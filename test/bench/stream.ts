// Many conversations streaming at once through one daemon on its Unix socket, with the real ACP
// client: how many chunks a second get through, how late each arrives after the model sent it, the
// daemon's peak memory, and that every chunk of every conversation arrives, in order.
import { mkdtempSync, rmSync } from "node:fs";
import { ServerResponse } from "node:http";
import { connect as netConnect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Duplex } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { z } from "zod";
import { writeSettings } from "../../store/index.js";
import { lastUserText, type ModelServer } from "../model-server.js";
import { benchSettings } from "./agent.js";
import { procCpuMs, procMemory, spawnDaemon } from "./daemon.js";
import { summarize, type Summary } from "./stats.js";

/** Each chunk is one token of this fixed width, naming its conversation, round and place: `[012.1.07]`. */
const WIDTH = 10;
const TOKEN = /\[\d{3}\.\d\.\d{2}\]/;

function token(conversation: number, round: number, k: number): string {
  return `[${String(conversation).padStart(3, "0")}.${round}.${String(k).padStart(2, "0")}]`;
}

function answerOf(conversation: number, round: number, chunks: number): string {
  let text = "";
  for (let k = 0; k < chunks; k++) text += token(conversation, round, k);
  return text;
}

export interface StreamOptions {
  conversations: number;
  rounds: number;
  chunks: number;
  chunkDelayMs: number;
}

export interface StreamRow extends StreamOptions {
  expected: number;
  received: number;
  lost: number;
  /** Conversations whose text arrived other than whole and in order. */
  garbled: number;
  failedTurns: number;
  /** Why turns failed, each reason once. */
  failures: string[];
  /** Chunks a second through the daemon, all conversations together. */
  throughput: number;
  /** What the model server's pace allows: every conversation streaming without pause. */
  pacedThroughput: number;
  /** Client receive time less model server send time, per chunk (ms). */
  latency: Summary;
  /** The daemon's RSS with its sessions open before streaming, and its peak (VmHWM) after (MB). */
  rssBeforeMb: number;
  peakMb: number;
  /** The daemon's CPU time per chunk streamed (µs). */
  cpuPerChunkUs: number;
  /** The share of a core the daemon, and this process (model server and client), used while streaming. */
  daemonCpu: number;
  benchCpu: number;
}

/**
 * Times each SSE write of the scripted server that carries a token: the server paces its chunks
 * with timers, which run late under load, so the time a chunk left is taken where it is written.
 */
function timeServerWrites(sent: Map<string, number>): () => void {
  const proto = ServerResponse.prototype;
  const own = Object.prototype.hasOwnProperty.call(proto, "write");
  const original = proto.write;
  proto.write = function (this: ServerResponse, ...args: Parameters<typeof original>) {
    const [chunk] = args;
    if (typeof chunk === "string") {
      const m = TOKEN.exec(chunk);
      if (m) sent.set(m[0], performance.now());
    }
    return original.apply(this, args);
  } as typeof original;
  return () => {
    if (own) proto.write = original;
    else delete (proto as { write?: unknown }).write;
  };
}

const DaemonLog = z.looseObject({ level: z.string(), msg: z.string(), error: z.string().optional() });

function safeJson(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

const LinkMeta = z.looseObject({ link: z.looseObject({ reply: z.boolean().optional() }).optional() });

export async function measureStreaming(server: ModelServer, opts: StreamOptions): Promise<StreamRow> {
  const dir = mkdtempSync(join(tmpdir(), "lnk-link-harness-bench-stream-"));
  const agent = { dir };
  writeSettings(agent, benchSettings(server.url));
  server.fallback = (request) => {
    const m = /bench (\d+) (\d+)/.exec(lastUserText(request));
    if (!m) return { error: { status: 400, message: "not a bench prompt" } };
    return { text: answerOf(Number(m[1]), Number(m[2]), opts.chunks), chunks: opts.chunks, chunkDelayMs: opts.chunkDelayMs };
  };
  const sent = new Map<string, number>();
  const restore = timeServerWrites(sent);
  const socketPath = join(dir, "acp.sock");
  const daemon = spawnDaemon(["--agent", dir, "--socket", socketPath]);
  const texts = new Map<string, string>();
  const latencies: number[] = [];
  try {
    await daemon.waitForLog(/serving ACP/);
    const socket = netConnect(socketPath);
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    const { readable, writable } = Duplex.toWeb(socket);
    const connection = acp
      .client({ name: "lnk-link-harness-bench" })
      .onNotification(acp.methods.client.session.update, ({ params }) => {
        const now = performance.now();
        const update = params.update;
        if (update.sessionUpdate !== "agent_message_chunk" || update.content.type !== "text") return;
        if (LinkMeta.safeParse(update._meta ?? {}).data?.link?.reply) return;
        const before = texts.get(params.sessionId) ?? "";
        const text = before + update.content.text;
        texts.set(params.sessionId, text);
        // Every token this update completed arrived now.
        for (let end = Math.ceil((before.length + 1) / WIDTH) * WIDTH; end <= text.length; end += WIDTH) {
          const at = sent.get(text.slice(end - WIDTH, end));
          if (at !== undefined) latencies.push(now - at);
        }
      })
      .connect(acp.ndJsonStream(writable, readable as ReadableStream<Uint8Array>));
    const agentSide = connection.agent;
    await agentSide.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    const sessions: string[] = [];
    for (let i = 0; i < opts.conversations; i++) {
      const made = await agentSide.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [], _meta: { link: { thread: `bench-${i}` } } });
      sessions.push(made.sessionId);
    }
    const rssBeforeMb = procMemory(daemon.pid, "VmRSS");
    const cpu0 = procCpuMs(daemon.pid);
    const own0 = process.cpuUsage();
    let failedTurns = 0;
    const failures = new Set<string>();
    const t0 = performance.now();
    for (let r = 0; r < opts.rounds; r++) {
      const answers = await Promise.all(
        sessions.map((sessionId, i) =>
          agentSide
            .request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: `bench ${i} ${r}` }] })
            .then((a) => {
              if (a.stopReason !== "end_turn") failures.add(`stop reason ${a.stopReason}`);
              return a.stopReason === "end_turn";
            })
            .catch((e: unknown) => {
              failures.add(e instanceof Error ? e.message : JSON.stringify(e));
              return false;
            }),
        ),
      );
      failedTurns += answers.filter((ok) => !ok).length;
    }
    const wall = performance.now() - t0;
    const cpu = procCpuMs(daemon.pid) - cpu0;
    const own = process.cpuUsage(own0);
    const peakMb = procMemory(daemon.pid, "VmHWM");
    connection.close();
    socket.destroy();
    // What the daemon said went wrong, each message once.
    for (const line of daemon.stderr().split("\n")) {
      const log = DaemonLog.safeParse(safeJson(line)).data;
      if (log && log.level !== "info") failures.add(`daemon ${log.level}: ${log.msg}${log.error ? `: ${log.error}` : ""}`);
    }

    let received = 0;
    let lost = 0;
    let garbled = 0;
    sessions.forEach((sessionId, i) => {
      let expected = "";
      for (let r = 0; r < opts.rounds; r++) expected += answerOf(i, r, opts.chunks);
      const got = texts.get(sessionId) ?? "";
      for (let at = 0; at < expected.length; at += WIDTH) {
        if (got.includes(expected.slice(at, at + WIDTH))) received++;
        else lost++;
      }
      if (got !== expected) garbled++;
    });
    const expected = opts.conversations * opts.rounds * opts.chunks;
    return {
      ...opts,
      expected,
      received,
      lost,
      garbled,
      failedTurns,
      failures: [...failures],
      throughput: received / (wall / 1000),
      pacedThroughput: opts.conversations * (1000 / opts.chunkDelayMs),
      latency: summarize(latencies),
      rssBeforeMb,
      peakMb,
      cpuPerChunkUs: (cpu * 1000) / Math.max(1, received),
      daemonCpu: cpu / wall,
      benchCpu: (own.user + own.system) / 1000 / wall,
    };
  } finally {
    restore();
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
