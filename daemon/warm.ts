// Warming a blank process: conversations with a scratch agent, in a folder of its own removed
// after (on the way out, should the process exit meanwhile; by the next process to warm up, should
// it be killed), over ACP connections within the process, one session each, whose model is a
// loopback endpoint of this process that answers one word, streamed as any OpenAI-compatible
// endpoint streams, and answers each runtime's own questions of it as that runtime would. The code
// of a prompt runs (the ACP layer and its streams, the session, the runtime's answers read, the
// turn: settings, events, the lock, the window, the model's client and its stream, the copy): each
// connection's first prompt a first turn's code, the next ones a later turn's, again and again, so
// that V8 has compiled the hottest of it by the time the agent bound next sends its first prompt.
// The runtimes' answers are forgotten before each prompt, so each turn asks them again: a bound
// agent's first session asks its own endpoint, and the code that asks and reads them, run once,
// would still be V8's slowest when it does (about 3 ms of a Bind's first answer). Nothing of any
// agent's is read or kept.
import { lstatSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Readable, Writable } from "node:stream";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import * as acp from "@agentclientprotocol/sdk";
import type { Settings } from "../protocol/index.js";
import { sweepFolder } from "../store/files.js";
import { processAlive } from "../store/lock.js";
import type { AgentOptions, RunningAgent } from "./agent.js";
import type { Target } from "./serve.js";

/** A scratch folder's name: the process's pid, then mkdtemp's six characters. */
const SCRATCH = "lnk-link-harness-warm-";
const SCRATCH_NAME = /^lnk-link-harness-warm-(\d{1,10})-[A-Za-z0-9]{6}$/;

/**
 * Removes the scratch folders of processes that are gone (killed while warming up, when nothing
 * of theirs ran to remove it): only this user's own folders, never through a link.
 */
function sweepScratch(): void {
  sweepFolder(tmpdir(), (name, path) => {
    const pid = Number(SCRATCH_NAME.exec(name)?.[1] ?? 0);
    if (pid <= 0 || pid === process.pid || processAlive(pid)) return false;
    const st = lstatSync(path);
    return st.isDirectory() && st.uid === process.getuid?.();
  });
}

/** The scratch agent's model, and the window each runtime's answer gives it. */
const MODEL = "warm-up";
const WINDOW = 8192;

/**
 * What each runtime answers of its own API (turn/runtime.ts asks them all of an endpoint on this
 * machine), so that the code reading each answer has run before a bound agent's first session asks
 * its own endpoint: Ollama, llama.cpp, vLLM (its list of models) and LM Studio.
 */
const RUNTIME_ANSWERS: Record<string, unknown> = {
  "POST /api/show": { model_info: { "general.architecture": "llama", "llama.context_length": WINDOW }, parameters: `num_ctx ${WINDOW}` },
  "GET /api/ps": { models: [{ name: MODEL, model: MODEL, context_length: WINDOW }] },
  "GET /props": { default_generation_settings: { n_ctx: WINDOW } },
  "GET /v1/models": { object: "list", data: [{ id: MODEL, object: "model", owned_by: MODEL, max_model_len: WINDOW }] },
  "GET /api/v0/models": { object: "list", data: [{ id: MODEL, object: "model", state: "loaded", loaded_context_length: WINDOW, max_context_length: WINDOW }] },
};

const chunk = (delta: object, finish: string | null, usage?: object) =>
  `data: ${JSON.stringify({ id: MODEL, object: "chat.completion.chunk", created: 0, model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }], ...(usage ? { usage } : {}) })}\n\n`;

/** Serves one connection over a pair of Node streams as the process serves stdio (serve.ts `Process.serveStreams`). */
export type ServeStreams = (input: Readable, output: Writable, target: Target) => Promise<void>;

export interface WarmOptions {
  /** How many prompts, at most. */
  prompts: number;
  /**
   * How the warm-up's connection is served: as stdio is, through the process's front, when given
   * (a blank process); straight to the scratch agent otherwise (the build's warm-up).
   */
  serve?: ServeStreams;
  /**
   * Over how many connections, each with a session of its own (a new conversation) taking its share
   * of the prompts: what a bound agent's client does first (connect, initialize, session/new, a
   * conversation's first turn) runs as often. One, unless said.
   */
  connections?: number;
  /** Whether to collect the warm-up's garbage once it is done (a blank process: collectGarbage). */
  collect?: boolean;
  /** Whether to stop before the next prompt: a Bind came, whose prompts the warm-up would slow. */
  enough?: () => boolean;
}

/** What a warm-up ran: its prompts, and the runtimes' questions its endpoint answered. */
export interface Warmed {
  prompts: number;
  asked: number;
}

/**
 * What the warm-up makes the process forget: what it kept of the scratch agent, once done; the
 * runtimes' answers, before each prompt but the first (checked with `enough` at once before it, so
 * never once an agent is bound, whose first session's answers they would be too).
 */
export interface WarmForget {
  state: () => void;
  answers: () => void;
}

/**
 * The warm-up client's connection to the scratch agent: through `serve` over a pair of Node streams
 * (the front, the web streams Node makes over them, the line bounds), or straight to the agent over
 * web streams. `end` closes the client's side.
 */
function connectScratch(agent: RunningAgent, serve: ServeStreams | undefined): { served: Promise<void>; stream: acp.Stream; end: () => void } {
  if (serve) {
    const toAgent = new PassThrough();
    const toClient = new PassThrough();
    const served = serve(toAgent, toClient, (input, output, gate, send) => agent.connect(input, output, { ...(gate ? { gate } : {}), ...(send ? { send } : {}) }));
    const stream = acp.ndJsonStream(Writable.toWeb(toAgent), Readable.toWeb(toClient) as ReadableStream<Uint8Array>);
    return { served, stream, end: () => toAgent.end() };
  }
  const toAgent = new TransformStream<Uint8Array, Uint8Array>();
  const toClient = new TransformStream<Uint8Array, Uint8Array>();
  const served = agent.connect(toAgent.readable, toClient.writable);
  return { served, stream: acp.ndJsonStream(toAgent.writable, toClient.readable), end: () => undefined };
}

/**
 * Runs prompts of a scratch agent, started with `start`, over `connections` connections, one session
 * each: `prompts` of them in all, or fewer once `enough` says so (the first always runs). Resolves
 * with how many ran, and how many of the runtimes' questions its endpoint answered.
 */
export async function warmPrompts(start: (o: AgentOptions) => RunningAgent, forget: WarmForget, o: WarmOptions): Promise<Warmed> {
  let ran = 0;
  let asked = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const known = RUNTIME_ANSWERS[`${req.method ?? ""} ${req.url ?? ""}`];
      if (known !== undefined) {
        asked++;
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify(known));
        return;
      }
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk({ role: "assistant", content: "warm" }, null));
      res.write(chunk({}, "stop", { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }));
      res.end("data: [DONE]\n\n");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  sweepScratch();
  const scratch = mkdtempSync(join(tmpdir(), `${SCRATCH}${process.pid}-`));
  // A process that exits while it warms up (a signal) removes it on the way out.
  const remove = () => rmSync(scratch, { recursive: true, force: true });
  process.once("exit", remove);
  let agent: RunningAgent | undefined;
  try {
    const { port } = server.address() as AddressInfo;
    // No window set: the runtime's answers are asked for, and read, as an agent's first session asks.
    const settings: Settings = { model: { provider: "warm-up", name: MODEL, base_url: `http://127.0.0.1:${port}/v1` } };
    agent = start({ agent: { dir: scratch }, version: "warm-up", max: 1024 * 1024, env: {}, settings, quiet: true });
    const connections = Math.max(1, o.connections ?? 1);
    const each = Math.ceil(o.prompts / connections);
    for (let c = 0; c < connections && (c === 0 || !o.enough?.()); c++) {
      const { served, stream, end } = connectScratch(agent, o.serve);
      const client = acp.client({ name: "warm-up" }).onNotification(acp.methods.client.session.update, () => undefined).connect(stream);
      await client.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
      const { sessionId } = await client.agent.request(acp.methods.agent.session.new, { cwd: scratch, mcpServers: [], _meta: { link: { thread: `warm-up-${c}` } } });
      let mine = 0;
      do {
        if (ran > 0) {
          // Looked at once before the answers are forgotten: a connection's initialize and session/new
          // came between the last look and its first prompt, and an agent bound meanwhile keeps its own.
          if (mine === 0 && o.enough?.()) break;
          forget.answers();
        }
        await client.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "warm up" }] });
        ran++;
        mine++;
      } while (mine < each && ran < o.prompts && !o.enough?.());
      client.close();
      end();
      // Its connection is let go: nothing waits for it to end.
      void served.catch(() => undefined);
    }
  } finally {
    await agent?.stop(false);
    server.closeAllConnections();
    server.close();
    process.off("exit", remove);
    remove();
    // Not the runtimes' answers: those of an agent bound meanwhile may be among them.
    forget.state();
  }
  return { prompts: ran, asked };
}

/**
 * Collects the warm-up's garbage at once, all of it: V8 would otherwise collect it in the middle of
 * the first turn of the agent bound next, its young generation holding some megabytes of the
 * warm-up's (a pause of 2 to 7 ms seen there). V8 exposes its collector to the contexts made after
 * it is told to: one is made for it, and let go.
 */
export function collectGarbage(): void {
  setFlagsFromString("--expose-gc");
  const gc: unknown = runInNewContext("typeof gc === 'function' ? gc : undefined");
  if (typeof gc === "function") gc();
}
