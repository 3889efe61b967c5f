// What a conversation cost and what the provider's cache held, from its answer events alone: the
// provider's own counts, the cost only where it reported one, and why each fall of the cached share
// happened (the fingerprints each answer keeps of what its prompt began with). `usage` and /status
// both read it from here, so they agree on every figure.
import { existsSync } from "node:fs";
import { StoreError, type AgentUsage, type AssistantMessage, type UsageMark, ConversationUsage, FallCause, Numbered, PromptPrints, SectionName, SlowTurn, Tokens, UsageCountState, UsageFigures } from "../protocol/index.js";
import { firstSince, isThread, listThreads, paths, writtenPast, readUsageMark, scanEvent, scanEvents, writeUsageMark, type AgentRef, type ConversationPaths, type Scanned } from "../store/index.js";
import { changedSections } from "./fingerprint.js";
import type { ModelAnswer } from "./model.js";
import type { ChatMessage } from "./prompt.js";
import type { TurnEvent } from "./types.js";
import { roughTokens } from "./window.js";

/** How many of the slowest turns are named. */
export const SLOWEST = 5;
/** A request's share fell when it cached less than this part of what the request before it sent (and a smaller share). */
const HELD = 0.9;

const share = (u: { in: number; cached: number }): number => (u.in > 0 ? u.cached / u.in : 0);

/**
 * Sums that stay in range whatever they add (a folder's answers written by hand, each of the
 * largest count or cost an event holds): a count at most the largest whole number a count can be,
 * an amount (a cost, a time) at most the largest finite one, where Infinity would be written null.
 */
export const addCount = (a: number, b: number): number => Math.min(a + b, Number.MAX_SAFE_INTEGER);
export const addAmount = (a: number, b: number): number => Math.min(a + b, Number.MAX_VALUE);
export const addTokens = (to: Tokens, u: Tokens): void => {
  to.in = addCount(to.in, u.in);
  to.out = addCount(to.out, u.out);
  to.cached = addCount(to.cached, u.cached);
};

/** What a share is compared with: an answer's model, counts and fingerprints. */
type Compared = Pick<AssistantMessage, "model" | "usage" | "prompt">;

/** Whether the cache held less of `now`'s prompt than of what `before` sent, and its share fell. */
export function fell(before: Compared, now: Compared): boolean {
  const b = before.usage;
  const u = now.usage;
  if (!b || !u || b.in === 0 || u.in === 0) return false;
  return share(u) < share(b) && u.cached < HELD * Math.min(b.in, u.in);
}

/** Why the cache held less: the first thing of the prompt that changed, or the provider. */
export function fallCause(before: Compared, now: Compared): { cause: FallCause; sections?: SectionName[] } {
  if (before.model !== now.model) return { cause: "model" };
  if (!before.prompt || !now.prompt) return { cause: "unknown" };
  const sections = changedSections(before.prompt.sections, now.prompt.sections);
  if (sections.length > 0) return { cause: "section", sections };
  if (before.prompt.window !== now.prompt.window) return { cause: "window" };
  return { cause: "provider" };
}

function emptyState(): UsageCountState {
  return { turns: 0, requests: 0, tokens: { in: 0, out: 0, cached: 0 }, turns_without_cost: 0, requests_without_cost: 0, model_ms: 0, slowest: [], falls: [] };
}

/** Counts a conversation's events, one at a time, in order; its state can be kept and counted on from. */
export class UsageCount {
  private readonly s: UsageCountState;

  /** `state`: where an earlier count of the same events got (usage.json); left out, the start. */
  constructor(
    readonly thread: string,
    state?: UsageCountState,
  ) {
    this.s = state ? structuredClone(state) : emptyState();
  }

  /** Starts a count after `before`, the last answer before the figures begin, which the first request's share is compared with. */
  static after(thread: string, before: AssistantMessage | undefined): UsageCount {
    const count = new UsageCount(thread);
    if (before?.usage) count.s.before = { model: before.model, usage: before.usage, ...(before.prompt ? { prompt: before.prompt } : {}) };
    return count;
  }

  add(e: Scanned): void {
    const s = this.s;
    if (e.kind === "other") return;
    if (e.kind === "turn") {
      this.close();
      s.open = { n: e.n, time: e.time, requests: 0, model_ms: 0, without_cost: false, fell: false };
      s.turns++;
      return;
    }
    const a = e.answer;
    if (!s.open) {
      // Answers of a turn begun before the figures do.
      s.open = { n: e.n, time: a.time, requests: 0, model_ms: 0, without_cost: false, fell: false };
      s.turns++;
    }
    const turn = s.open;
    s.requests++;
    turn.requests++;
    if (a.usage) addTokens(s.tokens, a.usage);
    if (a.cost !== undefined) s.cost = addAmount(s.cost ?? 0, a.cost);
    else {
      s.requests_without_cost++;
      turn.without_cost = true;
    }
    s.model_ms = addAmount(s.model_ms, a.latency_ms);
    turn.model_ms = addAmount(turn.model_ms, a.latency_ms);
    if (s.before && !turn.fell && fell(s.before, a)) {
      turn.fell = true;
      const b = s.before.usage;
      s.falls.push({ thread: this.thread, turn: turn.n, time: turn.time, request: e.n, share: share(a.usage ?? b), previous: share(b), ...fallCause(s.before, a) });
    }
    if (a.usage) s.before = { model: a.model, usage: a.usage, ...(a.prompt ? { prompt: a.prompt } : {}) };
  }

  private close(): void {
    const s = this.s;
    const t = s.open;
    if (!t) return;
    if (t.requests > 0 && t.without_cost) s.turns_without_cost++;
    s.slowest = slowest([...s.slowest, { thread: this.thread, turn: t.n, time: t.time, model_ms: t.model_ms, requests: t.requests }]);
    delete s.open;
  }

  /** The count as far as it got, to go on from later. */
  state(): UsageCountState {
    return structuredClone(this.s);
  }

  /** The figures, the turn under way counted as ended. */
  figures(): ConversationUsage {
    const done = new UsageCount(this.thread, this.s);
    done.close();
    const s = done.s;
    return {
      thread: this.thread,
      turns: s.turns,
      requests: s.requests,
      tokens: { ...s.tokens },
      cached_share: s.tokens.in > 0 ? s.tokens.cached / s.tokens.in : null,
      ...(s.cost !== undefined ? { cost: s.cost } : {}),
      turns_without_cost: s.turns_without_cost,
      requests_without_cost: s.requests_without_cost,
      model_ms: s.model_ms,
      slowest: s.slowest,
      falls: s.falls,
    };
  }
}

function slowest(turns: readonly SlowTurn[]): SlowTurn[] {
  return turns
    .filter((t) => t.requests > 0)
    .slice()
    .sort((a, b) => b.model_ms - a.model_ms || a.turn - b.turn)
    .slice(0, SLOWEST);
}

/** How far back the last answer before `since` is looked for, so the first request's share has one to compare with. */
const LOOK_BACK = 64;

/**
 * Whether a count kept in usage.json could be this conversation's up to the event it names: no more
 * turns or requests than events, each turn it names at or before that event and of this thread.
 * A file written by hand that claims more is counted again from the first event.
 */
function plausible(mark: UsageMark, thread: string): boolean {
  const c = mark.count;
  const within = (t: { thread: string; turn: number }) => t.thread === thread && t.turn <= mark.through;
  return c.turns <= mark.through && c.requests <= mark.through && c.slowest.every(within) && c.falls.every(within) && (c.open === undefined || c.open.n <= mark.through);
}

/** The time of a scanned event. */
const timeOf = (e: Scanned): string => (e.kind === "answer" ? e.answer.time : e.time);

/**
 * A conversation's figures, from its events (those at or after `since`, when given). Only the
 * answers are read whole and parsed; every other event's head is enough. Without `since`, the count
 * goes on from where the last one got (usage.json, derived, kept when the event it names is still
 * there with its time), and is kept there again: only the events written since are read.
 */
export function conversationUsage(conv: ConversationPaths, o: { since?: Date; warn?: (line: string) => void } = {}): ConversationUsage {
  const there = existsSync(conv.dir);
  const figures = countUsage(conv, o.since);
  const { end } = figures;
  // A folder moved away as it was counted: its figures would be some of its turns. (One not made yet has none.)
  if (there && !existsSync(conv.dir)) throw new StoreError(`conversation ${conv.thread} was moved or removed while it was counted`, conv.dir);
  // Said to a person only (the command): a turn's count of its cost lists no folder.
  if (o.warn && writtenPast(conv, end)) o.warn(`left out of ${conv.thread}: its events after number ${end}, which is missing`);
  return figures.usage;
}

/** The figures, and the number the count stopped at (the first not written). */
function countUsage(conv: ConversationPaths, since: Date | undefined): { usage: ConversationUsage; end: number } {
  if (since) {
    const from = firstSince(conv, since);
    let before: AssistantMessage | undefined;
    for (let n = from - 1; n >= Math.max(1, from - LOOK_BACK) && !before; n--) {
      const e = scanEvent(conv, n);
      if (e?.kind === "answer" && e.answer.usage) before = e.answer;
    }
    const count = UsageCount.after(conv.thread, before);
    let end = from;
    for (const e of scanEvents(conv, from)) {
      count.add(e);
      end = e.n + 1;
    }
    return { usage: count.figures(), end };
  }
  const mark = readUsageMark(conv);
  const at = mark ? scanEvent(conv, mark.through) : undefined;
  const holds = mark !== undefined && at !== undefined && timeOf(at) === mark.time && plausible(mark, conv.thread);
  const count = new UsageCount(conv.thread, holds ? mark.count : undefined);
  let last: Scanned | undefined;
  for (const e of scanEvents(conv, holds ? mark.through + 1 : 1)) {
    count.add(e);
    last = e;
  }
  if (last) {
    try {
      writeUsageMark(conv, { v: 1, through: last.n, time: timeOf(last), count: count.state() });
    } catch {
      // Derived: the figures stand without it, and the next count starts again from the first event.
    }
  }
  return { usage: count.figures(), end: last ? last.n + 1 : holds ? mark.through + 1 : 1 };
}

/** The figures of many conversations, summed. */
export function totalUsage(conversations: readonly ConversationUsage[]): UsageFigures {
  const tokens: Tokens = { in: 0, out: 0, cached: 0 };
  let cost: number | undefined;
  const total = { turns: 0, requests: 0, turns_without_cost: 0, requests_without_cost: 0, model_ms: 0 };
  for (const c of conversations) {
    addTokens(tokens, c.tokens);
    if (c.cost !== undefined) cost = addAmount(cost ?? 0, c.cost);
    total.turns = addCount(total.turns, c.turns);
    total.requests = addCount(total.requests, c.requests);
    total.turns_without_cost = addCount(total.turns_without_cost, c.turns_without_cost);
    total.requests_without_cost = addCount(total.requests_without_cost, c.requests_without_cost);
    total.model_ms = addAmount(total.model_ms, c.model_ms);
  }
  return {
    turns: total.turns,
    requests: total.requests,
    tokens,
    cached_share: tokens.in > 0 ? tokens.cached / tokens.in : null,
    ...(cost !== undefined ? { cost } : {}),
    turns_without_cost: total.turns_without_cost,
    requests_without_cost: total.requests_without_cost,
    model_ms: total.model_ms,
    slowest: slowest(conversations.flatMap((c) => c.slowest)),
    falls: conversations.flatMap((c) => c.falls),
  };
}

/** An agent's figures: each conversation's (or the one named) and their total. */
export function agentUsage(agent: AgentRef, o: { thread?: string; since?: Date; warn?: (line: string) => void } = {}): AgentUsage {
  const p = paths(agent);
  let threads = o.thread !== undefined ? [o.thread] : listThreads(p.chats, undefined, (shown) => o.warn?.(`left out: chats/${shown}: its name is not UTF-8 text`));
  // A folder of chats/ whose name is not a thread's (one made by hand) holds no conversation: named, and passed over.
  if (o.thread === undefined) {
    threads = threads.filter((t) => {
      if (isThread(t)) return true;
      o.warn?.(`left out: chats/${t}: not a thread's name`);
      return false;
    });
  }
  const conversations = threads.map((t) => conversationUsage(p.conversation(t), { ...(o.since ? { since: o.since } : {}), ...(o.warn ? { warn: o.warn } : {}) }));
  return { conversations, total: totalUsage(conversations) };
}

/** The sections of the system prompt that differ from those of the last answer among `events` (none when it kept no fingerprints). */
export function promptChanges(events: readonly Numbered[], prints: PromptPrints["sections"]): SectionName[] {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]?.event;
    if (e?.kind !== "message" || e.role !== "assistant") continue;
    return e.prompt ? changedSections(e.prompt.sections, prints) : [];
  }
  return [];
}

/**
 * What a turn reports after each request: the tokens the window holds now (the request's prompt and
 * answer, by the provider's counts, else the rough ones), the model's window, and the conversation's
 * cost so far once the provider reports one (its answer is written by then).
 */
export function usageReport(conv: ConversationPaths, answer: ModelAnswer, messages: readonly ChatMessage[], size: number, warn: (message: string) => void): TurnEvent {
  const used = answer.usage ? answer.usage.in + answer.usage.out : messages.reduce((s, m) => s + roughTokens(JSON.stringify(m)), 0) + roughTokens(answer.text);
  let cost: number | undefined;
  try {
    if (answer.cost !== undefined) cost = conversationCost(conv);
  } catch (e) {
    warn(`the conversation's cost was not counted: ${(e as Error).message}`);
  }
  return { type: "usage", ...(answer.usage ? { usage: answer.usage } : {}), used, size, ...(cost !== undefined ? { cost } : {}) };
}

/**
 * The cost the provider reported for a conversation's requests so far, or undefined when it reported
 * none: for the cumulative cost each usage_update carries. Counted on from usage.json, as `usage`
 * counts, so only the events written since the last count are read.
 */
export function conversationCost(conv: ConversationPaths): number | undefined {
  return conversationUsage(conv).cost;
}
