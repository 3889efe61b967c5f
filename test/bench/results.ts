// What a bench run found, and the targets each figure is held to.
import type { OverheadRow } from "./overhead.js";
import type { PrefixResult } from "./prefix.js";
import type { DenseResult } from "./dense.js";
import type { StartResult } from "./start.js";
import type { ClientResult } from "./client.js";
import { ms, type Summary } from "./stats.js";
import type { StreamRow } from "./stream.js";
import type { UsageResult } from "./usage.js";

export type Measured<T> = { measured: T } | { notMeasured: string };

export interface BenchResults {
  format: 1;
  date: string;
  mode: "full" | "quick";
  machine: {
    node: string;
    platform: string;
    cpus: number;
    cpu: string;
    memoryGb: number;
    tmpdir: string;
    /**
     * The share of all CPUs that other processes used during the run (null where /proc can't tell):
     * other work on the machine skews every figure.
     */
    otherWork: number | null;
    /** Whether each turn and floor read began with the young generation collected (--expose-gc). */
    youngCollected: boolean;
  };
  /** Spawn to exit of `node -e 0`: no Node program starts sooner. */
  nodeStart: Summary;
  overhead: OverheadRow[];
  prefix: PrefixResult;
  streaming: Measured<StreamRow[]>;
  start: Measured<StartResult>;
  /** The turn as a client sees it, with its floors (absent from runs before it was measured). */
  client?: Measured<ClientResult>;
  /** `lnk-link-harness usage` over a long conversation (left out of results written before it was measured). */
  usage?: Measured<UsageResult>;
  /** Dense deployment: Bind to the first answered prompt, and one process's memory at 1, 10 and 100 agents. */
  dense?: Measured<DenseResult>;
  targets: Target[];
  elapsedMs: number;
}

export interface Target {
  name: string;
  /** What was measured, in words and figures. */
  measured: string;
  /** Undefined when it could not be measured. */
  pass: boolean | undefined;
}

const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
const events = (n: number) => n.toLocaleString("en-US");

/** A window counts as full when it holds at least this many events. */
export const FULL_WINDOW = 1_800;

export function targets(r: Omit<BenchResults, "targets">): Target[] {
  const out: Target[] = [];
  const rows = r.overhead;
  // Sizes compared with the same window, full at each (the smallest window measured).
  const scaling = rows.filter((row) => row.pairs === Math.min(...rows.map((x) => x.pairs)));
  const first = scaling[0];
  const last = scaling.at(-1);
  if (first && last && last !== first) {
    const warm = last.warm.median / first.warm.median;
    const fresh = last.fresh.median / first.fresh.median;
    out.push({
      name: `overhead at ${events(last.size)} events within 1.5x of that at ${events(first.size)}, the same window, outgrown at both (medians)`,
      measured: `warm ${ratio(last.warm.median, first.warm.median)}, fresh ${ratio(last.fresh.median, first.fresh.median)} (windows of ${events(first.window.min)}-${events(first.window.max)} and ${events(last.window.min)}-${events(last.window.max)} events)`,
      pass: warm <= 1.5 && fresh <= 1.5,
    });
  }
  const full = rows.filter((row) => row.window.min >= FULL_WINDOW);
  out.push({
    name: "warm overhead at a full ~2,000-event window at most 5 ms (median)",
    measured: full.length ? full.map((row) => `${ms(row.warm.median)} ms at ${events(row.size)}`).join(", ") : "no size had a full window",
    pass: full.length ? full.every((row) => row.warm.median <= 5) : undefined,
  });
  // Held at the full window, as the target names it; the smaller windows are shown beside, where the
  // turn's fixed costs (the lock, one flush to disk) weigh more against a shorter read.
  const smaller = rows.filter((row) => !full.includes(row));
  out.push({
    name: "fresh overhead at a full ~2,000-event window within 1.5x of the read-once floor (medians)",
    measured: [
      full.length ? full.map((row) => `${ratio(row.fresh.median, row.floor.median)} at ${events(row.size)}`).join(", ") : "no size had a full window",
      ...(smaller.length ? [`(smaller windows: ${smaller.map((row) => `${ratio(row.fresh.median, row.floor.median)} at ${events(row.size)}`).join(", ")})`] : []),
    ].join(" "),
    pass: full.length ? full.every((row) => row.fresh.median <= 1.5 * row.floor.median) : undefined,
  });
  out.push({
    name: "prompt-cache prefix share at least 0.95 (mean)",
    measured: r.prefix.turns > 0 ? `${r.prefix.mean.toFixed(3)} over ${r.prefix.turns} requests, ${r.prefix.drops} drops` : "not measured",
    pass: r.prefix.turns > 0 ? r.prefix.mean >= 0.95 : undefined,
  });
  if ("measured" in r.streaming) {
    const most = r.streaming.measured.at(-1);
    out.push({
      name: `${most?.conversations ?? 0} conversations streaming at once lose no chunk`,
      measured: most ? `${most.received.toLocaleString("en-US")}/${most.expected.toLocaleString("en-US")} chunks, ${most.garbled} out of order, ${most.failedTurns} turns failed` : "-",
      pass: most ? most.lost === 0 && most.garbled === 0 && most.failedTurns === 0 : undefined,
    });
  } else out.push({ name: "200 conversations streaming at once lose no chunk", measured: `not measured: ${r.streaming.notMeasured}`, pass: undefined });
  if ("measured" in r.start) {
    const s = r.start.measured;
    out.push({
      name: "cold start to the first initialize answer at most 150 ms (median)",
      measured: `${ms(s.coldStart.median)} ms (node -e 0: ${ms(r.nodeStart.median)} ms)`,
      pass: s.coldStart.median <= 150,
    });
    out.push({
      name: "idle memory at most 100 MB (RSS)",
      measured: `${s.rssAfterInitializeMb.toFixed(0)} MB after initialize, ${s.rssAfterTurnMb.toFixed(0)} MB after one turn`,
      pass: Math.max(s.rssAfterInitializeMb, s.rssAfterTurnMb) <= 100,
    });
  } else {
    out.push({ name: "cold start to the first initialize answer at most 150 ms", measured: `not measured: ${r.start.notMeasured}`, pass: undefined });
    out.push({ name: "idle memory at most 100 MB", measured: `not measured: ${r.start.notMeasured}`, pass: undefined });
  }
  if (r.usage && "measured" in r.usage) {
    const u = r.usage.measured;
    out.push({
      name: `usage of a ${events(u.events)}-event conversation at most ${USAGE_TARGET_MS} ms, the command run whole, counting from the first event (median)`,
      measured: `${ms(u.command.median)} ms (${ms(u.inProcess.median)} ms of it counting, node -e 0 ${ms(u.nodeStart)} ms); ${u.commandKept ? `${ms(u.commandKept.median)} ms going on from usage.json` : ""}`,
      pass: u.command.median <= USAGE_TARGET_MS,
    });
  } else if (r.usage) out.push({ name: "usage of a 100,000-event conversation", measured: `not measured: ${r.usage.notMeasured}`, pass: undefined });
  if (r.dense && "measured" in r.dense) {
    const d = r.dense.measured;
    out.push({
      name: "Bind to the first answered prompt at most 20 ms over the model's own time (median)",
      measured: `${ms(d.bindOverModel.median)} ms over it (${ms(d.bindToAnswer.median)} ms in all, over ${d.bindToAnswer.n} binds)`,
      pass: d.bindOverModel.median <= 20,
    });
    const most = d.rss.at(-1);
    out.push({
      name: `one process serving ${most?.agents ?? 100} agents, each after one turn, at most 300 MB (RSS)`,
      measured: most ? `${most.rssMb.toFixed(0)} MB` : "no row",
      pass: most ? most.agents >= 100 && most.rssMb <= 300 : undefined,
    });
  } else if (r.dense) {
    out.push({ name: "Bind to the first answered prompt at most 20 ms over the model's own time", measured: `not measured: ${r.dense.notMeasured}`, pass: undefined });
  }
  out.push(...clientTargets(r.client));
  return out;
}

/**
 * OpenClaw 2026.9.6's steady overhead, measured on this machine with the same client, proxy and
 * script (430 to 550 ms, the median of turns 2 to 20), before the bench could run it beside the
 * daemon (`--openclaw`): the figure a run without it is held to. The lower end is taken.
 */
export const OPENCLAW_OVERHEAD_MS = 430;

/** The targets of the turn as a client sees it, each against its floor from the same run. */
function clientTargets(client: Measured<ClientResult> | undefined): Target[] {
  const spawnName = "spawn to the first answered prompt at most 3x Node's own start (medians)";
  const steadyName = "steady overhead end to end within 2x its floor: the durable write plus the pass-through's (medians)";
  const beside = client && "measured" in client ? client.measured.openclaw : undefined;
  const ran = beside && "turns" in beside ? beside : undefined;
  const openclawName = ran
    ? `steady overhead at least 50x below OpenClaw ${ran.version}'s, run beside it on Node ${ran.node} with the same client, proxy and script (medians)`
    : `steady overhead at least 50x below OpenClaw 2026.9.6's, ${OPENCLAW_OVERHEAD_MS} ms as measured on this machine before (${beside && "notMeasured" in beside ? `not run beside: ${beside.notMeasured}` : "not run beside: --openclaw runs it"})`;
  if (!client || !("measured" in client)) {
    const why = `not measured: ${client && "notMeasured" in client ? client.notMeasured : "not asked for"}`;
    return [
      { name: spawnName, measured: why, pass: undefined },
      { name: steadyName, measured: why, pass: undefined },
      { name: openclawName, measured: why, pass: undefined },
    ];
  }
  const c = client.measured;
  const floor = c.durableWrite.median + c.passThrough.overhead.median;
  // OpenClaw's overhead: measured beside in this run, or the figure measured before.
  const openclaw = ran?.turns.overhead.median ?? OPENCLAW_OVERHEAD_MS;
  // Each round's own ratio beside, to show how far the machine moved them (a round's floor is a
  // median of few turns, so the rounds' ratios scatter more than the one of all turns together).
  const byRound = c.rounds?.length ? `; by round ${c.rounds.map((r) => `${r.ratio.toFixed(2)}x`).join(", ")}` : "";
  return [
    {
      name: spawnName,
      measured: `${ms(c.spawn.firstTurn.median)} ms, ${ratio(c.spawn.firstTurn.median, c.nodeStart.median)} of node -e 0's ${ms(c.nodeStart.median)} ms (initialize ${ms(c.spawn.initialize.median)}, session/new ${ms(c.spawn.sessionNew.median)}, first turn ${ms(c.spawn.firstTurn.median)}, cumulative)`,
      pass: c.spawn.firstTurn.median <= 3 * c.nodeStart.median,
    },
    {
      name: steadyName,
      measured: `${ms(c.daemon.overhead.median)} ms (before the model ${ms(c.daemon.before.median)}, after ${ms(c.daemon.after.median)}), ${ratio(c.daemon.overhead.median, floor)} of ${ms(floor)} ms (durable write ${ms(c.durableWrite.median)}, pass-through ${ms(c.passThrough.overhead.median)})${byRound}`,
      pass: c.daemon.overhead.median <= 2 * floor,
    },
    {
      name: openclawName,
      measured: `${ms(c.daemon.overhead.median)} ms${ran ? ` against OpenClaw's ${ms(openclaw)} ms` : ""}: ${(openclaw / c.daemon.overhead.median).toFixed(0)}x below`,
      pass: c.daemon.overhead.median * 50 <= openclaw,
    },
  ];
}

/** A person waits for `usage` of their longest conversation about as long as for a page to load. */
export const USAGE_TARGET_MS = 2_000;
