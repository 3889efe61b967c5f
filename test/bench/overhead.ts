// The turn's own time (wall time less the time spent waiting on the model) as the conversation
// grows from 1,000 to 100,000 events with a full window of ~2,000 events: warm (the process took the
// previous turn, its event cache holds the window), fresh (the cache forgotten, as in a new process),
// and the floor: reading and parsing the window's files once, with nothing else.
import { readFileSync } from "node:fs";
import type { Event } from "../../protocol/index.js";
import { isErrno, readMark, readStats, writeSettings, type AgentRef, type ConversationPaths } from "../../store/index.js";
import { forgetProcessState, runTurn } from "../../turn/turn.js";
import { countEvent, emptyCount } from "../../turn/window.js";
import type { ModelServer } from "../model-server.js";
import { answerText, pairTokens, prefillEvent, questionText, settingsForBudget, windowOverhead } from "./agent.js";
import { conversationFixture, THREAD, type Fixture } from "./fixture.js";
import { summarize, type Summary } from "./stats.js";

/** Warm-up turns before each size's measured ones. */
export const WARMUPS = 10;
/** Measured turns of each kind in a full run; the window is sized to hold without a drop through them. */
export const FULL_TURNS = 40;
/** The window holds this many user messages and answers when full (two events each): ~2,000 events. */
export const FULL_PAIRS = 1_000;
/** A window a 1,000-event conversation fills too, to compare sizes with the same full window. */
export const SCALING_PAIRS = 450;
/** How much larger than FULL_PAIRS the budget may be made, to be full when measuring. */
const SLACK_PAIRS = 60;

export interface OverheadRow {
  size: number;
  /** The window's size it was measured with, in user messages and answers. */
  pairs: number;
  /** Events the model was sent (the window), fewest and most over the measured turns. */
  window: { min: number; max: number };
  budget: number;
  /** Files a fresh turn read (median): its window's events file, the events it holds first and last, those after it. */
  filesRead: number;
  warm: Summary;
  fresh: Summary;
  floor: Summary;
  /** Time waiting on the model in the warm turns (the scripted server in this process). */
  model: Summary;
  /** Whether the fixture was made in this run, and how long preparing it took. */
  madeFixture: boolean;
  prepareMs: number;
}

export interface OverheadOptions {
  sizes: readonly number[];
  /** The window's size, in user messages and answers. */
  pairs: number;
  turns: number;
  server: ModelServer;
  log: (line: string) => void;
}

/**
 * The budget, within [FULL_PAIRS, FULL_PAIRS + SLACK_PAIRS] pairs of tokens, that leaves the window
 * fullest when the measured turns begin without a drop before they end. Found with the turn's own
 * count, since where drops fall depends on every event since the conversation began.
 */
export function chooseBudget(events: readonly Event[], fullPairs = FULL_PAIRS): number {
  const pair = pairTokens();
  const user = prefillEvent(1, 0);
  const answer = prefillEvent(2, 0);
  const before = 1 + WARMUPS; // the fixture's first turn, then the warm-up turns
  const measured = 2 * FULL_TURNS;
  let best = { budget: fullPairs * pair, fill: -1 };
  for (let pairs = fullPairs; pairs <= fullPairs + SLACK_PAIRS; pairs++) {
    const budget = pairs * pair;
    const count = emptyCount();
    events.forEach((e, i) => countEvent(count, i + 1, e, budget));
    let n = events.length;
    let fill = Number.POSITIVE_INFINITY;
    let start: number | undefined;
    let dropped = false;
    for (let k = 0; k < before + measured; k++) {
      countEvent(count, ++n, user, budget);
      if (k >= before) {
        if (start !== undefined && count.start !== start) dropped = true;
        start = count.start;
        fill = Math.min(fill, n - (count.start ?? n) + 1);
      }
      countEvent(count, ++n, answer, budget);
    }
    if (!dropped && fill > best.fill) best = { budget, fill };
  }
  return best.budget;
}

type Gc = (options: { type: "minor" | "major" }) => void;
/** Node's collector, when the bench runs with --expose-gc (as `npm run bench` does). */
const gc = (globalThis as { gc?: Gc }).gc;
/** Collects the whole heap: what the parts before left, before a part that measures another process. */
export function collectAll(): void {
  gc?.({ type: "major" });
}

/** Whether each measurement starts with the young generation collected. */
export const YOUNG_COLLECTED = gc !== undefined;

/**
 * Collects the young generation, so a measurement starts, as in a new process, without the garbage
 * of the one before it (the floor's read leaves a window's worth): that garbage would otherwise bring
 * the next collection into the measured turn, which then pays to copy everything it has kept so far.
 */
function collectYoung(): void {
  gc?.({ type: "minor" });
}

/** The floor: read and JSON.parse the window's event files once, nothing else (ms). */
function readOnce(conv: ConversationPaths, from: number): number {
  collectYoung();
  const t0 = performance.now();
  let parsed = 0;
  for (let n = from; ; n++) {
    let text: string;
    try {
      text = readFileSync(conv.event(n), "utf8");
    } catch (e) {
      if (isErrno(e, "ENOENT")) break;
      throw e;
    }
    const event: unknown = JSON.parse(text);
    if (event !== null) parsed++;
  }
  const took = performance.now() - t0;
  if (parsed === 0) throw new Error("the floor read no event");
  return took;
}

async function timedTurn(agent: AgentRef, text: string): Promise<{ overhead: number; model: number }> {
  collectYoung();
  const t0 = performance.now();
  const outcome = await runTurn({ agent, thread: THREAD, message: { text } }, () => undefined);
  const wall = performance.now() - t0;
  if (outcome.failure) throw new Error(`a measured turn failed: ${outcome.failure.message}`);
  return { overhead: wall - outcome.modelMs, model: outcome.modelMs };
}

interface Measuring {
  size: number;
  agent: AgentRef;
  conv: ConversationPaths;
  budget: number;
  made: boolean;
  prepareMs: number;
  sent: number[];
  warm: number[];
  model: number[];
  floor: number[];
  fresh: number[];
  files: number[];
}

/**
 * The conversation of `size` events the overhead part measures with a budget of `pairs` (made once,
 * then reused by every part that asks for the same one), and its agent's settings written for the
 * model at `url`.
 */
export async function overheadConversation(size: number, pairs: number, url: string): Promise<Fixture> {
  const fixture = await conversationFixture(size, {
    key: `w${WARMUPS}-t${FULL_TURNS}-p${pairs}+${SLACK_PAIRS}`,
    budget: (events) => chooseBudget(events, pairs),
    firstTurn: async (agent, thread, budget) => {
      writeSettings(agent, settingsForBudget(url, budget, await windowOverhead(agent, url)));
      const outcome = await runTurn({ agent, thread, message: { text: questionText(0) } }, () => undefined);
      if (outcome.failure) throw new Error(`the fixture's first turn failed: ${outcome.failure.message}`);
    },
  });
  writeSettings(fixture.agent, settingsForBudget(url, fixture.budget, await windowOverhead(fixture.agent, url)));
  return fixture;
}

/**
 * Sizes take turns, one turn each in every round, so that other work on the machine, which comes
 * and goes, weighs on every size alike. A warm conversation stays warm meanwhile: the event cache
 * keeps many conversations, as a daemon serving several would.
 */
export async function measureOverhead(opts: OverheadOptions): Promise<OverheadRow[]> {
  const { server, log } = opts;
  let answers = 0;
  server.fallback = () => ({ text: answerText(answers++) });
  let asked = 0;
  const all: Measuring[] = [];
  for (const size of opts.sizes) {
    const t0 = performance.now();
    log(`overhead: ${size} events: preparing the conversation`);
    const { agent, conv, budget, made } = await overheadConversation(size, opts.pairs, server.url);
    all.push({ size, agent, conv, budget, made, prepareMs: performance.now() - t0, sent: [], warm: [], model: [], floor: [], fresh: [], files: [] });
  }
  // As a process that didn't make the fixtures would start.
  forgetProcessState();
  for (const m of all) {
    for (let i = 0; i < WARMUPS; i++) await timedTurn(m.agent, questionText(++asked));
    const mark = readMark(m.conv);
    if (mark?.budget !== m.budget) log(`overhead: ${m.size} events: the mark's budget is ${mark?.budget}, not ${m.budget}: the window was counted again`);
  }
  server.requests.length = 0;
  const sent = (m: Measuring) => {
    m.sent.push((server.requests.at(-1)?.body.messages?.length ?? 1) - 1);
    // Each request holds the whole window: keep none, so they don't pile up on the heap.
    server.requests.length = 0;
  };

  log(`overhead: ${opts.turns} warm turns a size`);
  for (let i = 0; i < opts.turns; i++) {
    for (const m of all) {
      const t = await timedTurn(m.agent, questionText(++asked));
      m.warm.push(t.overhead);
      m.model.push(t.model);
      sent(m);
    }
  }
  log(`overhead: ${opts.turns} fresh turns a size, each after the floor`);
  for (let i = 0; i < opts.turns; i++) {
    for (const m of all) {
      // Side by side, so that the ratio of the two holds however busy the machine is meanwhile.
      m.floor.push(readOnce(m.conv, readMark(m.conv)?.event ?? 1));
      forgetProcessState();
      readStats.files = 0;
      const t = await timedTurn(m.agent, questionText(++asked));
      m.fresh.push(t.overhead);
      m.files.push(readStats.files);
      sent(m);
    }
  }
  forgetProcessState();
  return all.map((m) => ({
    size: m.size,
    pairs: opts.pairs,
    window: { min: Math.min(...m.sent), max: Math.max(...m.sent) },
    budget: m.budget,
    filesRead: summarize(m.files).median,
    warm: summarize(m.warm),
    fresh: summarize(m.fresh),
    floor: summarize(m.floor),
    model: summarize(m.model),
    madeFixture: m.made,
    prepareMs: m.prepareMs,
  }));
}
