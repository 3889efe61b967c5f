// What a conversation cost and what the provider's cache held, from its answer events alone: the
// provider's own counts, the cost only where it reported one, and why each fall of the cached share
// happened (the fingerprints each answer keeps of what its prompt began with). `usage` and /status
// both read it from here, so they agree on every figure.
import type { AgentUsage, AssistantMessage, ConversationUsage, Fall, FallCause, SectionName, SlowTurn, Tokens, UsageFigures } from "../protocol/index.js";
import { firstSince, listThreads, paths, scanEvent, scanEvents, type AgentRef, type ConversationPaths, type Scanned } from "../store/index.js";
import { changedSections } from "./fingerprint.js";

/** How many of the slowest turns are named. */
export const SLOWEST = 5;
/** A request's share fell when it cached less than this part of what the request before it sent (and a smaller share). */
const HELD = 0.9;

const share = (u: { in: number; cached: number }): number => (u.in > 0 ? u.cached / u.in : 0);

/** Whether the cache held less of `now`'s prompt than of what `before` sent, and its share fell. */
export function fell(before: AssistantMessage, now: AssistantMessage): boolean {
  const b = before.usage;
  const u = now.usage;
  if (!b || !u || b.in === 0 || u.in === 0) return false;
  return share(u) < share(b) && u.cached < HELD * Math.min(b.in, u.in);
}

/** Why the cache held less: the first thing of the prompt that changed, or the provider. */
export function fallCause(before: AssistantMessage, now: AssistantMessage): { cause: FallCause; sections?: SectionName[] } {
  if (before.model !== now.model) return { cause: "model" };
  if (!before.prompt || !now.prompt) return { cause: "unknown" };
  const sections = changedSections(before.prompt.sections, now.prompt.sections);
  if (sections.length > 0) return { cause: "section", sections };
  if (before.prompt.window !== now.prompt.window) return { cause: "window" };
  return { cause: "provider" };
}

interface OpenTurn {
  n: number;
  time: string;
  requests: number;
  modelMs: number;
  withoutCost: boolean;
  fell: boolean;
}

/** Counts a conversation's events, one at a time, in order. */
export class UsageCount {
  private turns = 0;
  private requests = 0;
  private readonly tokens: Tokens = { in: 0, out: 0, cached: 0 };
  private cost: number | undefined;
  private turnsWithoutCost = 0;
  private requestsWithoutCost = 0;
  private modelMs = 0;
  private readonly done: SlowTurn[] = [];
  private readonly falls: Fall[] = [];
  private open: OpenTurn | undefined;

  /** `before`: the last answer before the figures begin, which the first request's share is compared with. */
  constructor(
    readonly thread: string,
    private before?: AssistantMessage,
  ) {}

  add(e: Scanned): void {
    if (e.kind === "other") return;
    if (e.kind === "turn") {
      this.close();
      this.open = { n: e.n, time: e.time, requests: 0, modelMs: 0, withoutCost: false, fell: false };
      this.turns++;
      return;
    }
    const a = e.answer;
    if (!this.open) {
      // Answers of a turn begun before the figures do.
      this.open = { n: e.n, time: a.time, requests: 0, modelMs: 0, withoutCost: false, fell: false };
      this.turns++;
    }
    const turn = this.open;
    this.requests++;
    turn.requests++;
    if (a.usage) {
      this.tokens.in += a.usage.in;
      this.tokens.out += a.usage.out;
      this.tokens.cached += a.usage.cached;
    }
    if (a.cost !== undefined) this.cost = (this.cost ?? 0) + a.cost;
    else {
      this.requestsWithoutCost++;
      turn.withoutCost = true;
    }
    this.modelMs += a.latency_ms;
    turn.modelMs += a.latency_ms;
    if (this.before && !turn.fell && fell(this.before, a)) {
      turn.fell = true;
      const b = this.before.usage ?? { in: 0, cached: 0 };
      this.falls.push({ thread: this.thread, turn: turn.n, time: turn.time, request: e.n, share: share(a.usage ?? b), previous: share(b), ...fallCause(this.before, a) });
    }
    if (a.usage) this.before = a;
  }

  private close(): void {
    const t = this.open;
    if (!t) return;
    if (t.requests > 0 && t.withoutCost) this.turnsWithoutCost++;
    this.done.push({ thread: this.thread, turn: t.n, time: t.time, model_ms: t.modelMs, requests: t.requests });
    this.open = undefined;
  }

  figures(): ConversationUsage {
    this.close();
    return {
      thread: this.thread,
      turns: this.turns,
      requests: this.requests,
      tokens: { ...this.tokens },
      cached_share: this.tokens.in > 0 ? this.tokens.cached / this.tokens.in : null,
      ...(this.cost !== undefined ? { cost: this.cost } : {}),
      turns_without_cost: this.turnsWithoutCost,
      requests_without_cost: this.requestsWithoutCost,
      model_ms: this.modelMs,
      slowest: slowest(this.done),
      falls: this.falls.slice(),
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
 * A conversation's figures, from its events (those at or after `since`, when given). Only the
 * answers are read whole and parsed; every other event's head is enough.
 */
export function conversationUsage(conv: ConversationPaths, o: { since?: Date } = {}): ConversationUsage {
  const from = o.since ? firstSince(conv, o.since) : 1;
  let before: AssistantMessage | undefined;
  for (let n = from - 1; n >= Math.max(1, from - LOOK_BACK) && !before; n--) {
    const e = scanEvent(conv, n);
    if (e?.kind === "answer" && e.answer.usage) before = e.answer;
  }
  const count = new UsageCount(conv.thread, before);
  for (const e of scanEvents(conv, from)) count.add(e);
  return count.figures();
}

/** The figures of many conversations, summed. */
export function totalUsage(conversations: readonly ConversationUsage[]): UsageFigures {
  const tokens: Tokens = { in: 0, out: 0, cached: 0 };
  let cost: number | undefined;
  const total = { turns: 0, requests: 0, turns_without_cost: 0, requests_without_cost: 0, model_ms: 0 };
  for (const c of conversations) {
    tokens.in += c.tokens.in;
    tokens.out += c.tokens.out;
    tokens.cached += c.tokens.cached;
    if (c.cost !== undefined) cost = (cost ?? 0) + c.cost;
    total.turns += c.turns;
    total.requests += c.requests;
    total.turns_without_cost += c.turns_without_cost;
    total.requests_without_cost += c.requests_without_cost;
    total.model_ms += c.model_ms;
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
export function agentUsage(agent: AgentRef, o: { thread?: string; since?: Date } = {}): AgentUsage {
  const p = paths(agent);
  const threads = o.thread !== undefined ? [o.thread] : listThreads(p.chats);
  const conversations = threads.map((t) => conversationUsage(p.conversation(t), o.since ? { since: o.since } : {}));
  return { conversations, total: totalUsage(conversations) };
}

/**
 * The cost the provider reported for a conversation's requests so far, or undefined when it reported
 * none: for the cumulative cost each usage_update carries. A derived cache of the process, since
 * events never change: each conversation is read once whole, then from its last answer counted on.
 */
const costs = new Map<string, { through: number; cost: number | undefined }>();
const KEPT_COSTS = 256;

export function conversationCost(conv: ConversationPaths): number | undefined {
  const known = costs.get(conv.dir) ?? { through: 0, cost: undefined };
  let { through, cost } = known;
  for (const e of scanEvents(conv, through + 1)) {
    through = e.n;
    if (e.kind === "answer" && e.answer.cost !== undefined) cost = (cost ?? 0) + e.answer.cost;
  }
  costs.delete(conv.dir);
  costs.set(conv.dir, { through, cost });
  if (costs.size > KEPT_COSTS) {
    const oldest = costs.keys().next().value;
    if (oldest !== undefined) costs.delete(oldest);
  }
  return cost;
}

/** Forgets the costs counted (for measuring a fresh process). */
export function forgetCosts(): void {
  costs.clear();
}
