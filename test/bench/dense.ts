// Dense deployment: a blank process's Bind to its first answered prompt, and the memory of one
// process serving 1, 10 and 100 agents (--agents), each after one turn.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeSettings } from "../../store/index.js";
import type { ModelServer, RecordedRequest } from "../model-server.js";
import { benchSettings } from "./agent.js";
import { initializeLine, procMemory, spawnDaemon } from "./daemon.js";
import { collectAll } from "./overhead.js";
import { summarize, type Summary } from "./stats.js";

export interface DenseResult {
  /** The Bind line sent to the prompt's answer read (ms), over `binds` blank processes. */
  bindToAnswer: Summary;
  /** The same, less the model server's own time for the prompt's request (ms). */
  bindOverModel: Summary;
  /** RSS of one --agents process after one turn of each agent (MB). */
  rss: { agents: number; rssMb: number; peakMb: number }[];
}

const line = (id: number, method: string, params: unknown) => `${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`;

/**
 * Sends the Bind on the control socket; resolves with its answer's line as soon as it is read, as a
 * client that goes on to the bound process at once would (the socket's close comes after it), or
 * with what came before the socket closed.
 */
function sendBind(control: string, bind: unknown): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(control);
    let got = "";
    s.setEncoding("utf8").on("data", (d: string) => {
      got += d;
      if (got.includes("\n")) resolve(got);
    });
    s.once("error", reject);
    s.once("close", () => resolve(got));
    s.write(`${JSON.stringify(bind)}\n`);
  });
}

async function oneBind(server: ModelServer, root: string, i: number): Promise<{ total: number; model: number }> {
  const store = join(root, `bind-${i}`);
  mkdirSync(store);
  const control = join(root, `c-${i}.sock`);
  const daemon = spawnDaemon(["--blank", control]);
  try {
    // Link starts a blank process ahead of the message that binds it: it has loaded its code by then.
    await daemon.waitForLog(/"blank: loaded"/, 10_000);
    const bind = { agent: { name: `b${i}`, id: `b${i}`, owner: "bench" }, key: "bench-key-0123456789abcdef", settings: benchSettings(server.url), store };
    const seen = server.requests.length;
    // The bench's own heap collected first: it is the model server and the client too, and what the
    // parts before it left (the conversations of part 1) is not to be collected in the measure.
    collectAll();
    const t0 = performance.now();
    const answer = await sendBind(control, bind);
    if (answer.trim() !== "{}") throw new Error(`the Bind was refused: ${answer.trim()}`);
    daemon.child.stdin.write(initializeLine());
    daemon.child.stdin.write(line(2, "session/new", { cwd: store, mcpServers: [], _meta: { link: { thread: "first" } } }));
    await daemon.waitForLine(/"id":2,/);
    daemon.child.stdin.write(line(3, "session/prompt", { sessionId: "first", prompt: [{ type: "text", text: "Hello." }] }));
    const got = await daemon.waitForLine(/"id":3,/, 30_000);
    const total = performance.now() - t0;
    if (!got.includes('"end_turn"')) throw new Error(`the first prompt did not end well: ${got.slice(0, 300)}`);
    const request = server.requests[seen] as RecordedRequest;
    await request.ended;
    // The model's own time: from its request reaching the server to its answer's end, on this
    // process's clock (the server's reading and checking of the request is the model's, as it is
    // a real endpoint's).
    return { total, model: (request.over ?? request.arrived) - request.arrived };
  } finally {
    daemon.child.stdin.end();
    await daemon.stop();
  }
}

async function rssWith(server: ModelServer, root: string, count: number): Promise<{ agents: number; rssMb: number; peakMb: number }> {
  const dir = join(root, `shared-${count}`);
  const agents = Array.from({ length: count }, (_, i) => {
    const own = join(dir, `a${i}`);
    writeSettings({ dir: own }, benchSettings(server.url));
    return { name: `a${i}`, id: `a${i}-id`, owner: "bench", home: own, files: own, port: 0, env: {} };
  });
  const file = join(dir, "agents.json");
  writeFileSync(file, JSON.stringify(agents));
  const daemon = spawnDaemon(["--agents", file]);
  try {
    daemon.child.stdin.write(initializeLine());
    await daemon.waitForLine(/"id":1,/, 30_000);
    let id = 10;
    for (const a of agents) {
      const meta = { link: { agent: a.name } };
      daemon.child.stdin.write(line(id, "session/new", { cwd: a.files, mcpServers: [], _meta: { link: { agent: a.name, thread: "one" } } }));
      await daemon.waitForLine(new RegExp(`"id":${id},`), 30_000);
      daemon.child.stdin.write(line(id + 1, "session/prompt", { sessionId: "one", prompt: [{ type: "text", text: "Hello." }], _meta: meta }));
      const got = await daemon.waitForLine(new RegExp(`"id":${id + 1},`), 30_000);
      if (!got.includes('"end_turn"')) throw new Error(`agent ${a.name}'s turn did not end well: ${got.slice(0, 300)}`);
      id += 2;
    }
    return { agents: count, rssMb: procMemory(daemon.pid, "VmRSS"), peakMb: procMemory(daemon.pid, "VmHWM") };
  } finally {
    daemon.child.stdin.end();
    await daemon.stop();
  }
}

export async function measureDense(server: ModelServer, o: { binds: number; agents: number[] }): Promise<DenseResult> {
  const root = mkdtempSync(join(tmpdir(), "lnk-link-harness-bench-dense-"));
  try {
    server.fallback = () => ({ text: "Bound, and answering." });
    const totals: number[] = [];
    const over: number[] = [];
    for (let i = 0; i < o.binds; i++) {
      const { total, model } = await oneBind(server, root, i);
      totals.push(total);
      over.push(total - model);
    }
    const rss = [];
    for (const count of o.agents) rss.push(await rssWith(server, root, count));
    return { bindToAnswer: summarize(totals), bindOverModel: summarize(over), rss };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
