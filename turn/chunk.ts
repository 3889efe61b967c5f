// One chunk of a streamed answer, as an OpenAI-compatible endpoint sends it: its id, its choices'
// deltas (text, thinking, calls) and finish reasons, and the usage the last one carries. The schema
// says what a chunk may be; a chunk of the plain shapes an endpoint sends is taken by a check made by
// hand that takes exactly what the schema takes of them (a property test holds the two together),
// and anything else goes through the schema. Checked by the schema alone, each chunk ran zod's
// generic code, which V8 interprets for a process's first turns. The schema reads only the keys it
// names: keeping the others (loose) walked every key an endpoint sent, a third of a second for an
// event of 2 MiB of them.
import { z } from "zod";

const Delta = z.object({
  content: z.string().nullish(),
  reasoning_content: z.string().nullish(),
  reasoning: z.string().nullish(),
  reasoning_details: z.array(z.unknown()).nullish(),
  refusal: z.string().nullish(),
  tool_calls: z
    .array(
      z.object({
        index: z.number().int().nonnegative(),
        id: z.string().nullish(),
        function: z.object({ name: z.string().nullish(), arguments: z.string().nullish() }).nullish(),
      }),
    )
    .nullish(),
});

/** The provider's usage as it came: every number checked by hand, so one odd value never loses the chunk. */
export const Reported = z.object({
  prompt_tokens: z.unknown().optional(),
  completion_tokens: z.unknown().optional(),
  prompt_tokens_details: z.object({ cached_tokens: z.unknown().optional() }).nullish().catch(undefined),
  // DeepSeek names its cache hits so.
  prompt_cache_hit_tokens: z.unknown().optional(),
  // Only some providers (OpenRouter) report what a request cost.
  cost: z.unknown().optional(),
});

export const Chunk = z.object({
  id: z.string().nullish(),
  choices: z.array(z.object({ delta: Delta.nullish(), finish_reason: z.string().nullish() })).nullish(),
  usage: Reported.nullish().catch(undefined),
});

export type ChunkData = z.infer<typeof Chunk>;
export type ReportedUsage = z.infer<typeof Reported>;

/** An object, not an array, and without an own `__proto__` (JSON.parse makes one; the schema's copy leaves it out, so only the schema may read it). */
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v) && !Object.hasOwn(v, "__proto__");
const nothing = (v: unknown): boolean => v === undefined || v === null;
const textOrNothing = (v: unknown): boolean => v === undefined || v === null || typeof v === "string";

/** A delta the schema takes as it is: absent, or text and thinking as strings, calls of the plain shape. */
function plainDelta(d: unknown): boolean {
  if (nothing(d)) return true;
  if (!isRecord(d)) return false;
  if (!textOrNothing(d.content) || !textOrNothing(d.reasoning_content) || !textOrNothing(d.reasoning) || !textOrNothing(d.refusal)) return false;
  if (!nothing(d.reasoning_details) && !Array.isArray(d.reasoning_details)) return false;
  const calls = d.tool_calls;
  if (nothing(calls)) return true;
  if (!Array.isArray(calls)) return false;
  for (const call of calls as unknown[]) {
    if (!isRecord(call) || !Number.isSafeInteger(call.index) || (call.index as number) < 0 || !textOrNothing(call.id)) return false;
    const f = call.function;
    if (!nothing(f) && (!isRecord(f) || !textOrNothing(f.name) || !textOrNothing(f.arguments))) return false;
  }
  return true;
}

/**
 * The chunk as it came, when it is of the plain shapes: the schema would take it, changing nothing of
 * what it reads (the keys it does not name are left in, and read by no one); undefined for anything
 * else, which only the schema may judge.
 */
export function plainChunk(raw: unknown): ChunkData | undefined {
  if (!isRecord(raw) || !textOrNothing(raw.id)) return undefined;
  const choices = raw.choices;
  if (!nothing(choices)) {
    if (!Array.isArray(choices)) return undefined;
    for (const c of choices as unknown[]) if (!isRecord(c) || !textOrNothing(c.finish_reason) || !plainDelta(c.delta)) return undefined;
  }
  const usage = raw.usage;
  // A usage the schema would drop (not an object, or its details not one) is the schema's to drop.
  if (!nothing(usage) && (!isRecord(usage) || !(nothing(usage.prompt_tokens_details) || isRecord(usage.prompt_tokens_details)))) return undefined;
  return raw as ChunkData;
}

/** The most choices one chunk holds (an answer asks for one), and calls one choice's delta makes (as one answer). */
export const CHUNK_CHOICES_MAX = 16;
export const CHUNK_CALLS_MAX = 128;

/** A chunk that fails the answer: why, in the harness's words (never the endpoint's text). */
export class Refused {
  constructor(readonly why: string) {}
}

/**
 * A chunk read: as the schema takes it, or as it takes the chunk's unambiguous other forms (a call
 * numbered "0", content as parts of text). A chunk it still refuses is skipped when it carries no
 * text, thinking or call, and fails the answer when it does (Refused), as does one of more choices or
 * calls than any answer's, before the schema walks them.
 */
export function readChunk(raw: unknown): ChunkData | Refused | undefined {
  const over = tooMany(raw);
  if (over !== undefined) return new Refused(over);
  const plain = plainChunk(raw);
  if (plain) return plain;
  const parsed = Chunk.safeParse(raw);
  if (parsed.success) return parsed.data;
  const other = salvaged(raw);
  const again = other === undefined ? parsed : Chunk.safeParse(other);
  if (again.success) return again.data;
  return carries(raw) ? new Refused(`the model sent a chunk with text, thinking or calls that can't be read: ${issue(again.error.issues[0])}`) : undefined;
}

/** The choices of a chunk, when it has them as an array. */
const choicesOf = (raw: unknown): unknown[] | undefined => (isRecord(raw) && Array.isArray(raw.choices) ? (raw.choices as unknown[]) : undefined);
const deltaOf = (choice: unknown): Record<string, unknown> | undefined => (isRecord(choice) && isRecord(choice.delta) ? choice.delta : undefined);

/** Why a chunk holds more than any answer's does, if it does. */
function tooMany(raw: unknown): string | undefined {
  const choices = choicesOf(raw);
  if (choices === undefined) return undefined;
  if (choices.length > CHUNK_CHOICES_MAX) return `the model sent a chunk of ${choices.length} choices, where one holds at most ${CHUNK_CHOICES_MAX}`;
  for (const choice of choices) {
    const calls = deltaOf(choice)?.tool_calls;
    if (Array.isArray(calls) && calls.length > CHUNK_CALLS_MAX) return `the model sent a chunk of ${calls.length} calls, where one answer makes at most ${CHUNK_CALLS_MAX}`;
  }
  return undefined;
}

/** Whether a value holds anything: not null or absent, nor an empty text or list. */
const holds = (v: unknown): boolean => !nothing(v) && v !== "" && !(Array.isArray(v) && v.length === 0);

/**
 * Whether a chunk carries text, thinking or calls: what the answer would lose, and with thinking
 * what a provider that is sent its model's thinking back (DeepSeek's reasoning_content) is sent.
 */
function carries(raw: unknown): boolean {
  return (choicesOf(raw) ?? []).some((choice) => {
    const d = deltaOf(choice);
    return d !== undefined && (holds(d.content) || holds(d.tool_calls) || holds(d.reasoning_content) || holds(d.reasoning) || holds(d.reasoning_details));
  });
}

/** A call's number sent as the digits of one. */
const DIGITS = /^\d{1,15}$/;
/** Content sent as parts, each of text: what they say, joined. */
function partsText(content: unknown): string | undefined {
  if (!Array.isArray(content)) return undefined;
  let text = "";
  for (const part of content as unknown[]) {
    if (!isRecord(part) || part.type !== "text" || typeof part.text !== "string") return undefined;
    text += part.text;
  }
  return text;
}

/** A call numbered by the digits of its number, numbered by it. */
const numbered = (call: unknown): unknown => (isRecord(call) && typeof call.index === "string" && DIGITS.test(call.index) ? { ...known(call, CALL_KEYS), index: Number(call.index) } : call);

/** The keys of each part of a chunk the schema reads: a copy holds only them (an endpoint's others may be many). */
const CHUNK_KEYS = ["id", "choices", "usage"] as const;
const CHOICE_KEYS = ["delta", "finish_reason"] as const;
const DELTA_KEYS = ["content", "reasoning_content", "reasoning", "reasoning_details", "refusal", "tool_calls"] as const;
const CALL_KEYS = ["index", "id", "function"] as const;
const known = (o: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> => Object.fromEntries(keys.filter((k) => Object.hasOwn(o, k)).map((k) => [k, o[k]]));

/** The chunk with its calls' numbers as numbers and its content's parts of text joined, when it has either; else undefined. */
function salvaged(raw: unknown): unknown {
  const choices = choicesOf(raw);
  if (choices === undefined) return undefined;
  let changed = false;
  const taken = choices.map((choice) => {
    const d = deltaOf(choice);
    if (d === undefined) return choice;
    const text = partsText(d.content);
    const sent = Array.isArray(d.tool_calls) ? (d.tool_calls as unknown[]) : [];
    const calls = sent.map(numbered);
    const renumbered = calls.some((c, n) => c !== sent[n]);
    if (text === undefined && !renumbered) return choice;
    changed = true;
    return { ...known(choice as Record<string, unknown>, CHOICE_KEYS), delta: { ...known(d, DELTA_KEYS), ...(text !== undefined ? { content: text } : {}), ...(renumbered ? { tool_calls: calls } : {}) } };
  });
  return changed ? { ...known(raw as Record<string, unknown>, CHUNK_KEYS), choices: taken } : undefined;
}

/** What of a chunk the schema refused, by where it is and what it should be: no value of the endpoint's. */
function issue(i: z.core.$ZodIssue | undefined): string {
  if (i === undefined) return "not a chunk";
  const at = i.path.map((k, n) => (typeof k === "number" ? `[${k}]` : `${n > 0 ? "." : ""}${String(k)}`)).join("") || "the chunk";
  if (i.code === "invalid_type") {
    const expected = i.expected === "int" ? "whole number" : i.expected;
    return `${at} is not ${/^[aeiou]/.test(expected) ? "an" : "a"} ${expected}`;
  }
  if (i.code === "too_small" || i.code === "too_big") return `${at} is out of range`;
  return `${at} is not of a chunk's shape`;
}
