// OpenClaw beside the daemon (`--openclaw`): its steady turns measured in the same run, on the same
// machine, with the same client, proxy and script, rather than taken from a figure measured before.
// OpenClaw 2026.9.6 needs Node 24.16 or later; both it and a Node 24 (the official binary, as the
// `node` package's node-<platform>-<arch> ships it) are installed from the npm registry, once, into
// the bench's cache folder, with no install scripts run. Its gateway runs offline, its one model the
// scripted one behind the proxy; its ACP bridge (`openclaw acp`) is driven over stdio by the ACP
// SDK's client, as the daemon is.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { homedir } from "node:os";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import { behindProxy, drive, pooled, turns, type TurnSplit } from "./client.js";
import { freePort } from "../fixtures/port.js";
import type { ModelServer } from "../model-server.js";

export const OPENCLAW_VERSION = "2026.9.6";
/** The Node it runs on: a 24 at or past the 24.16 it asks for. */
export const OPENCLAW_NODE = "24.22.3";
/** The gateway's token, which its bridge is given: the gateway listens on loopback only, for this run. */
const TOKEN = "lnk-link-harness-bench";
/** How long the gateway may take to listen, and the bridge to answer its first request: a start of OpenClaw's takes seconds. */
const START_MS = 120_000;

export interface OpenClawResult {
  version: string;
  node: string;
  /** Turns 2 on of one session through its bridge. */
  turns: TurnSplit;
  /** Its gateway's spawn to its port taking connections (ms). */
  gatewayMs: number;
  /** Its bridge's spawn to `initialize` answered, and to `session/new` answered (ms, cumulative). */
  initializeMs: number;
  sessionNewMs: number;
}

/** The bench's cache folder: what it installs to run beside the daemon, kept between runs. */
export function benchCache(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "lnk-link-harness", "bench");
}

/** The last lines of what a process said, on one line. */
const lastLines = (said: string): string => said.trim().split("\n").slice(-3).join(" / ");

/** Runs a command to its end; rejects with the last of what it said when it fails. */
function run(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env, stdio: ["ignore", "ignore", "pipe"] });
    let said = "";
    child.stderr.setEncoding("utf8").on("data", (d: string) => (said = (said + d).slice(-2000)));
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve() : reject(new Error(`${command} ${args.join(" ")} failed (${String(code)}): ${lastLines(said)}`))));
  });
}

/**
 * `spec` installed into `dir` with npm, unless a finished install is there already (it writes a
 * mark once done, so an install cut short is made again, never used half made).
 */
async function installed(dir: string, spec: string, env: NodeJS.ProcessEnv, log: (line: string) => void): Promise<void> {
  const mark = join(dir, ".installed");
  if (existsSync(mark)) return;
  log(`openclaw: installing ${spec} into ${dir} (once)`);
  mkdirSync(dir, { recursive: true });
  const npm = process.env.npm_execpath;
  const [command, args] = npm ? [process.execPath, [npm]] : ["npm", []];
  await run(command, [...args, "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save", "--ignore-scripts", spec], env);
  writeFileSync(mark, `${spec}\n`);
}

/** The gateway's configuration: local, on loopback at `port`, its one model the scripted one at `baseUrl`. */
export function openclawConfig(o: { port: number; baseUrl: string; workspace: string; logFile: string }): object {
  return {
    gateway: { mode: "local", port: o.port, bind: "loopback", auth: { mode: "token", token: TOKEN } },
    update: { checkOnStart: false },
    logging: { file: o.logFile },
    agents: { defaults: { workspace: o.workspace, heartbeat: { every: "0m" }, model: { primary: "scripted/scripted" } } },
    models: {
      mode: "replace",
      providers: {
        scripted: {
          baseUrl: o.baseUrl,
          apiKey: "local-key",
          api: "openai-completions",
          models: [
            {
              id: "scripted",
              name: "Scripted",
              reasoning: false,
              input: ["text"],
              cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
              contextWindow: 128000,
              maxTokens: 4096,
            },
          ],
        },
      },
    },
  };
}

/** Resolves once something takes connections on `port`; rejects should `child` exit first, or after START_MS. */
async function listening(port: number, child: ChildProcess, said: () => string): Promise<void> {
  const until = performance.now() + START_MS;
  for (;;) {
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, "127.0.0.1", () => {
        socket.end();
        resolve(true);
      });
      socket.on("error", () => resolve(false));
    });
    if (open) return;
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`its gateway exited (${String(child.exitCode ?? child.signalCode)}): ${said()}`);
    if (performance.now() > until) throw new Error(`its gateway took no connection within ${START_MS / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Ends a process: asked first, then killed. */
async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const closed = new Promise<void>((resolve) => child.once("close", () => resolve()));
  child.kill("SIGTERM");
  const late = setTimeout(() => child.kill("SIGKILL"), 5_000);
  await closed;
  clearTimeout(late);
}

/**
 * OpenClaw's steady turns: installed (once), its gateway started on a state folder of this run's,
 * its bridge driven for `turns` turns of one session; turns 2 on are its steady ones, as the daemon's.
 */
export async function measureOpenClaw(server: ModelServer, o: { turns: number; log: (line: string) => void }): Promise<OpenClawResult> {
  const cache = benchCache();
  const nodeDir = join(cache, `node-${OPENCLAW_NODE}`);
  const appDir = join(cache, `openclaw-${OPENCLAW_VERSION}`);
  const nodeBin = join(nodeDir, "node_modules", `node-${process.platform}-${process.arch}`, "bin");
  const node = join(nodeBin, "node");
  const openclaw = join(appDir, "node_modules", "openclaw", "openclaw.mjs");
  // Its Node first on the path, for npm's and OpenClaw's own children alike.
  const env: NodeJS.ProcessEnv = { ...process.env, PATH: `${nodeBin}:${process.env.PATH ?? ""}` };
  await installed(nodeDir, `node-${process.platform}-${process.arch}@${OPENCLAW_NODE}`, process.env, o.log);
  await installed(appDir, `openclaw@${OPENCLAW_VERSION}`, env, o.log);
  return behindProxy(server, "openclaw", async (dir, proxy) => {
    const state = join(dir, "openclaw");
    const workspace = join(state, "workspace");
    mkdirSync(workspace, { recursive: true });
    const port = await freePort();
    const config = join(state, "openclaw.json");
    writeFileSync(config, JSON.stringify(openclawConfig({ port, baseUrl: proxy.url, workspace, logFile: join(state, "openclaw.log") }), null, 2));
    // Its temporary files (its locks among them) in the run's folder too, removed with it.
    const tmp = join(state, "tmp");
    mkdirSync(tmp);
    const own = { OPENCLAW_STATE_DIR: state, OPENCLAW_CONFIG_PATH: config, TMPDIR: tmp, PATH: env.PATH ?? "" };
    o.log(`openclaw: ${OPENCLAW_VERSION} on Node ${OPENCLAW_NODE}, its gateway and ${o.turns} turns through its ACP bridge`);
    const started = performance.now();
    const gateway = spawn(node, [openclaw, "gateway", "run"], { env: { ...env, ...own }, stdio: ["ignore", "pipe", "pipe"] });
    let said = "";
    const hear = (d: Buffer) => (said = (said + d.toString("utf8")).slice(-2000));
    gateway.stdout.on("data", hear);
    gateway.stderr.on("data", hear);
    try {
      await listening(port, gateway, () => lastLines(said));
      const gatewayMs = performance.now() - started;
      const spawned = performance.now();
      const d = drive(node, [openclaw, "acp", "--url", `ws://127.0.0.1:${port}`, "--token", TOKEN], own);
      try {
        await d.client.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
        const initializeMs = performance.now() - spawned;
        const { sessionId } = await d.client.request(acp.methods.agent.session.new, { cwd: workspace, mcpServers: [] });
        const sessionNewMs = performance.now() - spawned;
        // Its bridge's CPU is not OpenClaw's (its gateway does the turn's work): left out, not shown as if it were.
        const { cpu: _bridge, ...split } = pooled([await turns(d, proxy, sessionId, o.turns)]);
        return { version: OPENCLAW_VERSION, node: OPENCLAW_NODE, turns: split, gatewayMs, initializeMs, sessionNewMs };
      } finally {
        await stop(d.child);
        await d.close();
      }
    } finally {
      await stop(gateway);
    }
  });
}
