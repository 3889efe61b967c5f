// `npm run bench [-- --quick] [-- --only overhead,prefix,streaming,start,usage,client,dense] [-- --profile DIR [--profile-interval US]] [-- --against BUILD]`: measures
// the turn and the daemon on this machine against the scripted model server, prints a table and
// writes it as bench/results/latest.json and latest.svg (quick.* and partial.* for shorter runs).
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { cpus, platform, release, tmpdir, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { startModelServer, type ModelServer } from "../model-server.js";
import { ROOT } from "../fixtures/built.js";
import { writeSettings } from "../../store/index.js";
import { benchSettings } from "./agent.js";
import { daemonMissing, setDaemonNodeArgs } from "./daemon.js";
import { measureOverhead, FULL_PAIRS, FULL_TURNS, SCALING_PAIRS, YOUNG_COLLECTED } from "./overhead.js";
import { watchOtherWork } from "./machine.js";
import { measurePrefix } from "./prefix.js";
import { targets, type BenchResults, type Measured } from "./results.js";
import { measureDense, type DenseResult } from "./dense.js";
import { measureStart, nodeStart, type StartResult } from "./start.js";
import { measureAgainst, measureClient, type ClientResult } from "./client.js";
import { measureTakeover } from "./takeover.js";
import { measureOpenClaw } from "./openclaw.js";
import { measureStreaming, type StreamRow } from "./stream.js";
import { renderSvg } from "./svg.js";
import { renderTable } from "./table.js";
import { measureUsage, type UsageResult } from "./usage.js";

const PARTS = ["overhead", "prefix", "streaming", "start", "usage", "client", "dense"] as const;
type Part = (typeof PARTS)[number];

interface Plan {
  sizes: number[];
  turns: number;
  prefixTurns: number;
  prefixWindowPairs: number;
  conversations: number[];
  rounds: number;
  starts: number;
  /** The conversation `usage` reads, in events, and how many times. */
  usageSize: number;
  usageRuns: number;
  /** Turns of one session driven as a client sees them, and spawns to a first answer. */
  clientTurns: number;
  /** Rounds of those turns, each a fresh daemon and pass-through. */
  clientRounds: number;
  clientStarts: number;
  /** Processes of each (the daemon, the pass-through) in the stamped pass of the client part. */
  clientStamped: number;
  /** Processes of each, and turns each, of the client part's turns by their age. */
  clientAgeing: { processes: number; turns: number };
  /** New processes each way (with the window's events file, without) taking a long conversation's next turn. */
  takeoverRuns: number;
  /** Paired rounds of this build's daemon and another's (--against). */
  againstRounds: number;
  binds: number;
  agents: number[];
}

const FULL: Plan = { sizes: [1_000, 10_000, 100_000], turns: FULL_TURNS, prefixTurns: 300, prefixWindowPairs: 100, conversations: [1, 50, 200], rounds: 3, starts: 20, usageSize: 100_000, usageRuns: 5, clientTurns: 20, clientRounds: 5, clientStarts: 10, clientStamped: 3, clientAgeing: { processes: 3, turns: 300 }, takeoverRuns: 10, againstRounds: 40, binds: 20, agents: [1, 10, 100] };
const QUICK: Plan = { sizes: [1_000, 10_000], turns: 10, prefixTurns: 200, prefixWindowPairs: 80, conversations: [1, 20], rounds: 1, starts: 5, usageSize: 100_000, usageRuns: 3, clientTurns: 10, clientRounds: 2, clientStarts: 3, clientStamped: 1, clientAgeing: { processes: 1, turns: 100 }, takeoverRuns: 3, againstRounds: 12, binds: 5, agents: [1, 10] };
const CHUNKS = 50;
const CHUNK_DELAY_MS = 20;

/** A command line the bench can't take: said in one line, with no stack. */
class UsageError extends Error {}

/** What a run was asked for on its command line. */
interface Args {
  quick: boolean;
  only: Set<Part>;
  profile: string | undefined;
  /** Microseconds between a profile's samples (Node's own default: 1,000, coarse for a turn of a few milliseconds). */
  profileInterval: number | undefined;
  /** Another build's daemon, run in paired rounds with this one's (the client part). */
  against: string | undefined;
  /** OpenClaw run beside the daemon (the client part), installed into the bench's cache the first time. */
  openclaw: boolean;
}

function parseArgs(argv: string[]): Args {
  let quick = false;
  let only = new Set<Part>(PARTS);
  let profile: string | undefined;
  let profileInterval: number | undefined;
  let against: string | undefined;
  let openclaw = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--quick") quick = true;
    else if (arg === "--only") {
      const names = (argv[++i] ?? "").split(",");
      const bad = names.filter((name) => !(PARTS as readonly string[]).includes(name));
      if (bad.length) throw new UsageError(`--only takes ${PARTS.join(",")}, not ${bad.join(",")}`);
      only = new Set(names as Part[]);
    } else if (arg === "--profile") {
      profile = argv[++i];
      if (profile === undefined || profile === "") throw new UsageError("--profile takes the folder its profiles are written to");
    } else if (arg === "--profile-interval") {
      const text = argv[++i] ?? "";
      profileInterval = Number(text);
      if (!/^[0-9]+$/.test(text) || profileInterval < 1 || profileInterval > 1_000_000) throw new UsageError(`--profile-interval takes microseconds, a whole number from 1 to 1000000, not ${JSON.stringify(text)}`);
    } else if (arg === "--against") {
      against = againstDaemon(argv[++i] ?? "");
    } else if (arg === "--openclaw") openclaw = true;
    else throw new UsageError(`unknown argument ${String(arg)}; usage: run.js [--quick] [--only ${PARTS.join(",")}] [--profile DIR [--profile-interval US]] [--against BUILD] [--openclaw]`);
  }
  if (profileInterval !== undefined && profile === undefined) throw new UsageError("--profile-interval is the interval of --profile DIR's samples: give --profile DIR too");
  if (against !== undefined && !only.has("client")) throw new UsageError("--against runs with the client part: leave --only out, or name client in it");
  if (openclaw && !only.has("client")) throw new UsageError("--openclaw runs with the client part: leave --only out, or name client in it");
  return { quick, only, profile, profileInterval, against, openclaw };
}

/** The daemon of the build `--against` names: a checkout's folder, built, or its daemon's file itself. */
function againstDaemon(given: string): string {
  if (given === "") throw new UsageError("--against takes another build: its folder (built) or its dist/daemon/lnk-link-harness.cjs");
  const daemon = existsSync(join(given, "package.json")) ? join(given, "dist", "daemon", "lnk-link-harness.cjs") : given;
  if (statSync(daemon, { throwIfNoEntry: false })?.isFile() !== true) throw new UsageError(`--against: no daemon at ${daemon} (build that checkout first: npm run build)`);
  return resolve(daemon);
}

const log = (line: string) => process.stderr.write(`bench: ${line}\n`);

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const plan = args.quick ? QUICK : FULL;
  const t0 = performance.now();
  const otherWork = watchOtherWork();
  if (args.profile) setDaemonNodeArgs(["--cpu-prof", "--cpu-prof-dir", args.profile, ...(args.profileInterval !== undefined ? ["--cpu-prof-interval", String(args.profileInterval)] : [])]);
  // Each part talks to a model server of its own, started for it and closed after it, so that what
  // a part measures does not hold what the parts before it left: one server shared by all kept every
  // request they made (their bodies, thousands of messages each) in the bench's own process, which
  // is the client too.
  const own = async <T>(part: (server: ModelServer) => Promise<T>): Promise<T> => {
    const fresh = await startModelServer();
    try {
      return await part(fresh);
    } finally {
      await fresh.close();
    }
  };
  // The same window, full at every size, to see whether the turn grows with the conversation; then
  // the ~2,000-event window the 5 ms target names, at the sizes that fill it.
  const overhead = args.only.has("overhead")
    ? await own(async (server) => [
        ...(await measureOverhead({ sizes: plan.sizes, pairs: SCALING_PAIRS, turns: plan.turns, server, log })),
        ...(await measureOverhead({ sizes: plan.sizes.filter((s) => s >= 10_000), pairs: FULL_PAIRS, turns: plan.turns, server, log })),
      ])
    : [];

  log(`prefix: ${plan.prefixTurns} turns`);
  const prefix = args.only.has("prefix")
    ? await own((s) => measurePrefix(s, plan.prefixTurns, plan.prefixWindowPairs))
    : { turns: 0, windowPairs: 0, drops: 0, mean: Number.NaN, min: Number.NaN, meanBetweenDrops: Number.NaN };

  const probe = mkdtempSync(join(tmpdir(), "lnk-link-harness-bench-probe-"));
  // An agent with settings: the daemon serves no other.
  const missing = await own((server) => {
    writeSettings({ dir: probe }, benchSettings(server.url));
    return daemonMissing(probe);
  }).finally(() => rmSync(probe, { recursive: true, force: true }));
  if (missing) log(`the daemon is not measured: ${missing}`);

  let start: Measured<StartResult> = { notMeasured: missing ?? "not asked for (--only)" };
  if (!missing && args.only.has("start")) {
    log(`start: ${plan.starts} cold starts`);
    try {
      start = { measured: await own((s) => measureStart(s, plan.starts)) };
    } catch (e) {
      start = { notMeasured: (e as Error).message };
    }
  }

  let streaming: Measured<StreamRow[]> = { notMeasured: missing ?? "not asked for (--only)" };
  if (!missing && args.only.has("streaming")) {
    const rows: StreamRow[] = [];
    try {
      for (const conversations of plan.conversations) {
        log(`streaming: ${conversations} conversations at once`);
        rows.push(await own((s) => measureStreaming(s, { conversations, rounds: plan.rounds, chunks: CHUNKS, chunkDelayMs: CHUNK_DELAY_MS })));
      }
      streaming = { measured: rows };
    } catch (e) {
      streaming = { notMeasured: (e as Error).message };
    }
  }

  let client: Measured<ClientResult> = { notMeasured: missing ?? "not asked for (--only)" };
  if (!missing && args.only.has("client")) {
    try {
      const measured = await own((s) => measureClient(s, { turns: plan.clientTurns, rounds: plan.clientRounds, starts: plan.clientStarts, stamped: plan.clientStamped, ageing: plan.clientAgeing, log }));
      measured.takeover = await own((s) => measureTakeover(s, { size: 10_000, runs: plan.takeoverRuns, log }));
      const other = args.against;
      if (other !== undefined) measured.against = await own((s) => measureAgainst(s, other, { turns: plan.clientTurns, rounds: plan.againstRounds, log }));
      if (args.openclaw) {
        try {
          measured.openclaw = await own((s) => measureOpenClaw(s, { turns: plan.clientTurns, log }));
        } catch (e) {
          measured.openclaw = { notMeasured: (e as Error).message };
        }
      }
      client = { measured };
    } catch (e) {
      client = { notMeasured: (e as Error).message };
    }
  }

  let dense: Measured<DenseResult> = { notMeasured: missing ?? "not asked for (--only)" };
  if (!missing && args.only.has("dense")) {
    log(`dense: ${plan.binds} binds, then ${plan.agents.join(", ")} agents in one process`);
    try {
      dense = { measured: await own((s) => measureDense(s, { binds: plan.binds, agents: plan.agents })) };
    } catch (e) {
      dense = { notMeasured: (e as Error).message };
    }
  }

  log("node -e 0");
  const bare = "measured" in start ? start.measured.nodeStart : await nodeStart(plan.starts);

  let usage: Measured<UsageResult> = { notMeasured: "not asked for (--only)" };
  if (args.only.has("usage")) {
    try {
      usage = { measured: measureUsage(plan.usageSize, plan.usageRuns, bare.median, log) };
    } catch (e) {
      usage = { notMeasured: (e as Error).message };
    }
  }
  const cpu = cpus();
  const partial: Omit<BenchResults, "targets"> = {
    format: 1,
    date: new Date().toISOString(),
    mode: args.quick ? "quick" : "full",
    machine: {
      node: process.versions.node,
      platform: `${platform()} ${release()}`,
      cpus: cpu.length,
      cpu: cpu[0]?.model.trim() ?? "unknown CPU",
      memoryGb: Math.round(totalmem() / 2 ** 30),
      tmpdir: tmpdir(),
      otherWork: otherWork() ?? null,
      youngCollected: YOUNG_COLLECTED,
    },
    nodeStart: bare,
    overhead,
    prefix,
    streaming,
    start,
    client,
    usage,
    dense,
    elapsedMs: performance.now() - t0,
  };
  const results: BenchResults = { ...partial, targets: targets(partial) };
  const table = renderTable(results);
  process.stdout.write(`${table}\n`);
  const dir = join(ROOT, "bench", "results");
  mkdirSync(dir, { recursive: true });
  // Only the full run's results are for keeping.
  if (!existsSync(join(dir, ".gitignore"))) writeFileSync(join(dir, ".gitignore"), "quick.*\npartial.*\n");
  const stem = args.only.size < PARTS.length ? "partial" : args.quick ? "quick" : "latest";
  writeFileSync(join(dir, `${stem}.json`), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(join(dir, `${stem}.svg`), renderSvg(results));
  log(`wrote bench/results/${stem}.json and ${stem}.svg`);
}

main().catch((e: unknown) => {
  process.stderr.write(`bench: ${e instanceof UsageError ? e.message : e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(e instanceof UsageError ? 2 : 1);
});
