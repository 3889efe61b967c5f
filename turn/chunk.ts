// One chunk of a streamed answer, as an OpenAI-compatible endpoint sends it: its id, its choices'
// deltas (text, thinking, calls) and finish reasons, and the usage the last one carries. The schema
// says what a chunk may be; a chunk of the plain shapes an endpoint sends is taken by a check made by
// hand that takes exactly what the schema takes of them (a property test holds the two together),
// and anything else goes through the schema. Checked by the schema alone, each chunk ran zod's
// generic code, which V8 interprets for a process's first turns.
import { z } from "zod";

const Delta = z
  .object({
    content: z.string().nullish(),
    reasoning_content: z.string().nullish(),
    reasoning: z.string().nullish(),
    reasoning_details: z.array(z.unknown()).nullish(),
    refusal: z.string().nullish(),
    tool_calls: z
      .array(
        z
          .object({
            index: z.number().int().nonnegative(),
            id: z.string().nullish(),
            function: z.object({ name: z.string().nullish(), arguments: z.string().nullish() }).loose().nullish(),
          })
          .loose(),
      )
      .nullish(),
  })
  .loose();

/** The provider's usage as it came: every number checked by hand, so one odd value never loses the chunk. */
export const Reported = z
  .object({
    prompt_tokens: z.unknown().optional(),
    completion_tokens: z.unknown().optional(),
    prompt_tokens_details: z.object({ cached_tokens: z.unknown().optional() }).loose().nullish().catch(undefined),
    // DeepSeek names its cache hits so.
    prompt_cache_hit_tokens: z.unknown().optional(),
    // Only some providers (OpenRouter) report what a request cost.
    cost: z.unknown().optional(),
  })
  .loose();

export const Chunk = z
  .object({
    id: z.string().nullish(),
    choices: z.array(z.object({ delta: Delta.nullish(), finish_reason: z.string().nullish() }).loose()).nullish(),
    usage: Reported.nullish().catch(undefined),
  })
  .loose();

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
 * The chunk as the schema gives it, when it is of the plain shapes (the schema would take it whole,
 * changing nothing of what is read); undefined for anything else, which only the schema may judge.
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

/** A chunk read: as the schema takes it, or undefined when the schema refuses it (the chunk is skipped). */
export function readChunk(raw: unknown): ChunkData | undefined {
  const plain = plainChunk(raw);
  if (plain) return plain;
  const parsed = Chunk.safeParse(raw);
  return parsed.success ? parsed.data : undefined;
}
