// The agent every measurement talks to: settings pointing at the scripted model server, events
// shaped and sized like real ones (~300 bytes a file), and the window's budget found by asking a turn.
import { rmSync } from "node:fs";
import { Event, type Settings } from "../../protocol/index.js";
import { paths, readMark, writeSettings, type AgentRef } from "../../store/index.js";
import { messageHeader } from "../../turn/sections.js";
import { runTurn } from "../../turn/turn.js";
import { eventTokens } from "../../turn/window.js";

export const MODEL = "bench-model";
export const PROVIDER = "bench";
/** The answer's share and the margin of every bench window (tokens); the budget is what's left. */
export const ANSWER_SHARE = 1_024;
export const MARGIN = 256;

/** Text lengths that make event files of ~300 bytes, as real ones are. */
export const USER_CHARS = 180;
export const ANSWER_CHARS = 96;

const WORDS = (
  "the window holds what the model sees of a conversation and a turn reads it from its mark on " +
  "so that a long conversation costs no more than a short one when the prompt stays byte stable " +
  "between drops a provider cache keeps most of it warm and answers come sooner for less"
).split(" ");

/** Deterministic prose of exactly `length` ASCII characters. */
export function prose(seed: number, length: number): string {
  let state = (seed * 2_654_435_761) >>> 0 || 1;
  let out = "";
  while (out.length < length) {
    state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0;
    out += `${WORDS[state % WORDS.length] ?? "and"} `;
  }
  return out.slice(0, length);
}

export function questionText(i: number): string {
  return prose(1_000_003 + i, USER_CHARS);
}

export function answerText(i: number): string {
  return prose(2_000_003 + i, ANSWER_CHARS);
}

export function benchSettings(url: string, window?: Settings["window"]): Settings {
  return { model: { provider: PROVIDER, name: MODEL, base_url: url }, ...(window ? { window } : {}) };
}

/** Event n of a pre-filled conversation: a user message (odd n) or its answer (even n), as a turn writes them. */
export function prefillEvent(n: number, start: number): Event {
  const time = new Date(start + n * 30_000);
  if (n % 2 === 1) {
    return Event.parse({ v: 1, kind: "message", role: "user", time: time.toISOString(), text: prose(n, USER_CHARS), header: messageHeader(time, undefined, undefined) });
  }
  return Event.parse({
    v: 1,
    kind: "message",
    role: "assistant",
    time: time.toISOString(),
    text: prose(n, ANSWER_CHARS),
    model: MODEL,
    provider: PROVIDER,
    response_id: `chatcmpl-${String(n).padStart(24, "0")}`,
    usage: { in: 80_000 + (n % 9_000), out: 30, cached: 0 },
    latency_ms: 900 + (n % 100),
    stop: "end_turn",
  });
}

/** Rough tokens of one user message and its answer as the bench writes them. */
export function pairTokens(): number {
  return eventTokens(prefillEvent(1, 0)) + eventTokens(prefillEvent(2, 0));
}

const PROBE_MAX = 1_000_000;

/**
 * What the window's setting holds besides the conversation's budget (the answer's share, the
 * instructions and the margin), found by running one turn in a scratch thread and reading its mark:
 * so a bench window can be set to a budget exactly, whatever the system prompt weighs.
 */
export async function windowOverhead(agent: AgentRef, url: string): Promise<number> {
  writeSettings(agent, benchSettings(url, { max: PROBE_MAX, answer: ANSWER_SHARE, margin: MARGIN }));
  const conv = paths(agent).conversation("bench-probe");
  try {
    const outcome = await runTurn({ agent, thread: conv.thread, message: { text: "probe" } }, () => undefined);
    if (outcome.failure) throw new Error(`the probe turn failed: ${outcome.failure.message}`);
    const mark = readMark(conv);
    if (!mark) throw new Error("the probe turn wrote no window mark");
    return PROBE_MAX - mark.budget;
  } finally {
    rmSync(conv.dir, { recursive: true, force: true });
  }
}

/** Settings whose window gives the conversation exactly `budget` tokens. */
export function settingsForBudget(url: string, budget: number, overhead: number): Settings {
  return benchSettings(url, { max: budget + overhead, answer: ANSWER_SHARE, margin: MARGIN });
}
