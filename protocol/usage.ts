// What `lnk-link-harness usage --json` prints (and /status reads): a conversation's figures, from the
// provider's own counts on its answer events. Spec: "An event holds … the tokens in, out and cached,
// the latency, and the cost only when the provider reports it, never estimated."
import { z } from "zod";
import { PromptPrints, Usage } from "./events.js";
import { SectionName } from "./settings.js";

const count = z.number().int().nonnegative();

export const Tokens = z.object({ in: count, out: count, cached: count }).strict();
export type Tokens = z.infer<typeof Tokens>;

/** A turn and the time it waited on the model (its requests' latencies summed). */
export const SlowTurn = z
  .object({
    thread: z.string(),
    /** The number of the event that began it (its question). */
    turn: count,
    time: z.string(),
    model_ms: z.number().nonnegative(),
    requests: count,
  })
  .strict();
export type SlowTurn = z.infer<typeof SlowTurn>;

/**
 * Why a request's cached share fell: the model changed (another model's cache), a section of the
 * system prompt changed (named, in the prompt's order), the window's start moved (it dropped, or
 * /new began it again), the provider didn't cache what it was sent before, or it can't be told (an
 * answer kept before fingerprints were).
 */
export const FALL_CAUSES = ["model", "section", "window", "provider", "unknown"] as const;
export const FallCause = z.enum(FALL_CAUSES);
export type FallCause = z.infer<typeof FallCause>;

export const Fall = z
  .object({
    thread: z.string(),
    turn: count,
    time: z.string(),
    /** The answer whose request's share fell. */
    request: count,
    /** The cached share of that request, and of the one before it. */
    share: z.number(),
    previous: z.number(),
    cause: FallCause,
    sections: z.array(SectionName).optional(),
  })
  .strict();
export type Fall = z.infer<typeof Fall>;

export const UsageFigures = z
  .object({
    /** Turns begun (questions), counting one already under way where the figures begin. */
    turns: count,
    /** Requests answered: one answer event each. */
    requests: count,
    tokens: Tokens,
    /** Cached tokens over tokens in; null when nothing was sent. */
    cached_share: z.number().nullable(),
    /** The sum of the costs the provider reported; left out when it reported none. Never estimated. */
    cost: z.number().nonnegative().optional(),
    /** Turns with a request whose cost the provider didn't report. */
    turns_without_cost: count,
    requests_without_cost: count,
    /** Time waiting on the model, summed over the requests (ms). */
    model_ms: z.number().nonnegative(),
    /** The turns that waited longest on the model, longest first. */
    slowest: z.array(SlowTurn),
    /** Each turn whose cached share fell, the first fall of each, with its cause. */
    falls: z.array(Fall),
  })
  .strict();
export type UsageFigures = z.infer<typeof UsageFigures>;

export const ConversationUsage = UsageFigures.extend({ thread: z.string() }).strict();
export type ConversationUsage = z.infer<typeof ConversationUsage>;

export const AgentUsage = z.object({ conversations: z.array(ConversationUsage), total: UsageFigures }).strict();
export type AgentUsage = z.infer<typeof AgentUsage>;

/** A count's state as far as it got: what usage.json keeps, so the next count goes on from it. */
export const UsageCountState = UsageFigures.omit({ cached_share: true })
  .extend({
    /** The turn the count ended in, which later events may go on with. */
    open: z
      .object({ n: count, time: z.string(), requests: count, model_ms: z.number().nonnegative(), without_cost: z.boolean(), fell: z.boolean() })
      .strict()
      .optional(),
    /** The last answer with counts: the next request's share is compared with it. */
    before: z.object({ model: z.string(), usage: Usage, prompt: PromptPrints.optional() }).strict().optional(),
  })
  .strict();
export type UsageCountState = z.infer<typeof UsageCountState>;

/**
 * usage.json, beside a conversation's events: how far `usage` counted (the event it got to, and that
 * event's time, which says the file still belongs to these events) and its count there. Derived:
 * missing, stale or unreadable, the conversation is counted from its first event again.
 */
export const UsageMark = z
  .object({ v: z.literal(1), through: count.positive(), time: z.string(), count: UsageCountState })
  .strict();
export type UsageMark = z.infer<typeof UsageMark>;
