// Conversation events: one JSON object a file, written once (spec: decisions.txt, DESIGN.md "Events").
import { z } from "zod";
import { nestsWithin } from "./nesting.js";
import { SECTION_NAMES, SectionName, Verbosity } from "./settings.js";
export { nestsWithin } from "./nesting.js";

export const EVENT_VERSION = 1 as const;

export const EVENT_KINDS = { message: "message", toolResult: "tool_result", command: "command", failure: "failure" } as const;

/** Who a message is from; left out, the owner. */
export const From = z.object({ id: z.string(), name: z.string().optional(), owner: z.boolean() }).strict();
export type From = z.infer<typeof From>;

/** An OpenAI content part kept with a user message (images and documents as data: URLs). */
export const Part = z.union([
  z.object({ type: z.literal("image_url"), image_url: z.object({ url: z.string() }).loose() }).loose(),
  z.object({ type: z.literal("file"), file: z.object({ file_data: z.string().optional(), filename: z.string().optional() }).loose() }).loose(),
  z.object({ type: z.literal("text"), text: z.string() }).loose(),
]);
export type Part = z.infer<typeof Part>;

export const ToolCall = z.object({ id: z.string(), name: z.string(), arguments: z.string() }).strict();
export type ToolCall = z.infer<typeof ToolCall>;

export const Usage = z
  .object({ in: z.number().int().nonnegative(), out: z.number().int().nonnegative(), cached: z.number().int().nonnegative() })
  .strict();
export type Usage = z.infer<typeof Usage>;

/**
 * How deep a provider's thinking details, or a message's parts, may nest, in arrays and objects, the
 * list itself counted: real ones nest a few levels. Deeper, they could not be written back as JSON (V8 writes it by
 * recursion, and runs out of stack some thousands deep).
 */
export const THINKING_DEPTH_MAX = 64;


/**
 * A tool call's arguments as the model sent them (a JSON text): parsed when they are JSON that nests
 * no deeper than THINKING_DEPTH_MAX, else the text itself. Deeper, what is made of them (an ACP
 * update, a tool's request) could not be written as JSON: shown, and refused, as text.
 */
export function parsedArguments(text: string): unknown {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return text;
  }
  return nestsWithin(parsed, THINKING_DEPTH_MAX) ? parsed : text;
}

/** A model's thinking, kept as the provider sent it so it can be sent back with its calls. */
export const Thinking = z
  .object({
    reasoning_content: z.string().optional(),
    reasoning: z.string().optional(),
    reasoning_details: z
      .array(z.unknown())
      .refine((d) => nestsWithin(d, THINKING_DEPTH_MAX), `nests deeper than ${THINKING_DEPTH_MAX} arrays and objects`)
      .optional(),
  })
  .strict();
export type Thinking = z.infer<typeof Thinking>;

/** A short fingerprint: the first 12 hex digits of a SHA-256. */
const FINGERPRINT = /^[0-9a-f]{12}$/;
export const Fingerprint = z.string().regex(FINGERPRINT, "a fingerprint is 12 hex digits");

/**
 * What the request's prompt began with, as fingerprints: each section of the system prompt (a section
 * left empty is left out; tools' covers the calls offered too), and the window's start. When the share
 * of a prompt the provider cached falls, comparing them with the previous request's says why.
 */
export const PromptPrints = z
  .object({
    sections: z.partialRecord(SectionName, Fingerprint),
    window: Fingerprint,
  })
  .strict();
export type PromptPrints = z.infer<typeof PromptPrints>;

export const STOP_REASONS = ["end_turn", "max_turn_requests", "cancelled", "refusal", "max_tokens", "tool_calls"] as const;
export const StopReason = z.enum(STOP_REASONS);
export type StopReason = z.infer<typeof StopReason>;

const Time = z.iso.datetime({ offset: true });
const base = { v: z.literal(EVENT_VERSION), time: Time };

export const UserMessage = z
  .object({
    ...base,
    kind: z.literal(EVENT_KINDS.message),
    role: z.literal("user"),
    text: z.string(),
    // Loose, as a client's parts may carry more: never nested past what can be written back as JSON.
    parts: z
      .array(Part)
      .refine((p) => nestsWithin(p, THINKING_DEPTH_MAX), `nest deeper than ${THINKING_DEPTH_MAX} arrays and objects`)
      .optional(),
    from: From.optional(),
    channel: z.string().optional(),
    /** The working folder of the session it came in (an editor's repository), as the client named it. */
    cwd: z.string().optional(),
    /** The line that heads the message for the model: date, time, channel, speaker. Kept so it reads the same at every turn. */
    header: z.string(),
    /** `/skill:<name>`: the skill's SKILL.md as it was read then, sent with the message at every turn. */
    skill: z.object({ name: z.string(), path: z.string(), text: z.string() }).strict().optional(),
  })
  .strict();

export const AssistantMessage = z
  .object({
    ...base,
    kind: z.literal(EVENT_KINDS.message),
    role: z.literal("assistant"),
    text: z.string(),
    model: z.string(),
    provider: z.string(),
    response_id: z.string().optional(),
    usage: Usage.optional(),
    latency_ms: z.number().nonnegative(),
    /** Only when the provider reports it; never estimated. */
    cost: z.number().nonnegative().optional(),
    /** The provider's numbers left out of usage and cost as no count or cost can be: `<field> <value as sent>`. */
    left_out: z.array(z.string()).optional(),
    /** Fingerprints of what the prompt began with: its sections and the window's start. */
    prompt: PromptPrints.optional(),
    thinking: Thinking.optional(),
    tool_calls: z.array(ToolCall).optional(),
    stop: StopReason,
  })
  .strict();

export const Message = z.discriminatedUnion("role", [UserMessage, AssistantMessage]);

export const ToolResult = z
  .object({
    ...base,
    kind: z.literal(EVENT_KINDS.toolResult),
    call_id: z.string(),
    /** The name offered to the model: <tool>__<call>. */
    tool: z.string(),
    text: z.string(),
    error: z.boolean(),
    /** The answer was cut at 32 KiB. */
    truncated: z.boolean().optional(),
  })
  .strict();

/** The commands kept as events: each changes what the conversation remembers or does next (spec: commands.txt). */
export const COMMAND_NAMES = ["/new", "/model:set", "/chat:create", "/chat:fork", "/chat:resume", "/stop", "/verbosity:set"] as const;
export const CommandName = z.enum(COMMAND_NAMES);

/**
 * A conversation's name within its chat: `main` for the first, else the name `/chat:create` gave it
 * or the one `/chat:fork` made. Letters, digits, `.`, `_` and `-`; a session names it after a `~`.
 */
export const ConversationName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[\p{L}\p{N}][\p{L}\p{N}._-]*$/u, "must be letters, digits, '.', '_' or '-', starting with a letter or digit")
  .refine((s) => !s.includes(".."), "must not hold '..'");

export const Command = z
  .object({
    ...base,
    kind: z.literal(EVENT_KINDS.command),
    name: CommandName,
    /** /model:set: the model's name (left out: back to the agent's). */
    model: z.string().optional(),
    /** /chat:fork: the conversation it forks and the last event they share. */
    thread: z.string().optional(),
    event: z.number().int().positive().optional(),
    /** /chat:create, /chat:fork and /chat:resume: the conversation they begin or go back to. */
    conversation: ConversationName.optional(),
    /** /verbosity:set: how much of its tool calls the chat shows. */
    verbosity: Verbosity.optional(),
    /** The command as it was typed (an alias stays as typed), so a loaded chat reads as it was. */
    text: z.string().optional(),
    from: From.optional(),
  })
  .strict();

export const FAILURE_REASONS = ["context_too_long", "model_error", "network", "tool_error", "internal"] as const;

/** A turn that failed: why, and what was sent. */
export const Failure = z
  .object({
    ...base,
    kind: z.literal(EVENT_KINDS.failure),
    reason: z.enum(FAILURE_REASONS),
    message: z.string(),
    /** What the turn sent: rough tokens of the prompt and how many messages. */
    sent: z.object({ messages: z.number().int().nonnegative(), tokens: z.number().int().nonnegative() }).strict().optional(),
    status: z.number().int().optional(),
  })
  .strict();

export const Event = z.union([Message, ToolResult, Command, Failure]);
export type Event = z.infer<typeof Event>;
export type UserMessage = z.infer<typeof UserMessage>;
export type AssistantMessage = z.infer<typeof AssistantMessage>;
export type ToolResult = z.infer<typeof ToolResult>;
export type Command = z.infer<typeof Command>;
export type Failure = z.infer<typeof Failure>;

/**
 * Whether `raw` is, beyond doubt, a user message or a model's answer of the plainest form, the
 * events nearly every turn reads and writes: checked field by field here, each check as strict as
 * the schema's or stricter, with no key the schema doesn't know. It never says yes to what `Event`
 * refuses (a differential test holds it to that); anything else, a no, is for the schema to decide,
 * and to say what is wrong. A conversation of thousands of events read afresh checks them in a
 * fraction of the schema's time.
 */
export function quickEvent(raw: unknown): boolean {
  if (!isPlain(raw) || raw.v !== EVENT_VERSION || raw.kind !== EVENT_KINDS.message || typeof raw.text !== "string") return false;
  if (typeof raw.time !== "string" || !Time.safeParse(raw.time).success) return false;
  if (raw.role === "user") return onlyKeys(raw, USER_KEYS) && typeof raw.header === "string" && optionalString(raw.channel) && optionalString(raw.cwd);
  if (raw.role !== "assistant" || !onlyKeys(raw, ASSISTANT_KEYS)) return false;
  if (typeof raw.model !== "string" || typeof raw.provider !== "string" || !optionalString(raw.response_id)) return false;
  if (!amount(raw.latency_ms) || (raw.cost !== undefined && !amount(raw.cost))) return false;
  if (typeof raw.stop !== "string" || !STOPS.has(raw.stop)) return false;
  if (raw.usage !== undefined && !(isPlain(raw.usage) && onlyKeys(raw.usage, USAGE_KEYS) && count(raw.usage.in) && count(raw.usage.out) && count(raw.usage.cached))) return false;
  return raw.prompt === undefined || quickPrints(raw.prompt);
}

const USER_KEYS = new Set(["v", "time", "kind", "role", "text", "header", "channel", "cwd"]);
const ASSISTANT_KEYS = new Set(["v", "time", "kind", "role", "text", "model", "provider", "response_id", "usage", "latency_ms", "cost", "stop", "prompt"]);
const USAGE_KEYS = new Set(["in", "out", "cached"]);
const PRINT_KEYS = new Set(["sections", "window"]);
const STOPS = new Set<string>(STOP_REASONS);
const SECTIONS = new Set<string>(SECTION_NAMES);

/** An object as JSON.parse makes one: not an array, not null, of Object's own prototype. */
function isPlain(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && Object.getPrototypeOf(v) === Object.prototype;
}

/**
 * Every key of `o` is one of `keys` (a key the schema doesn't know makes it the schema's to judge).
 * Symbol keys count for nothing, as in the schema and in JSON: a turn keeps what it counted of an
 * event on the event itself (turn/derived.ts), under symbols, before the event is written.
 */
function onlyKeys(o: Record<string, unknown>, keys: ReadonlySet<string>): boolean {
  for (const k in o) if (!Object.hasOwn(o, k) || !keys.has(k)) return false;
  return true;
}

const optionalString = (v: unknown): boolean => v === undefined || typeof v === "string";
/** A whole number from 0, as the schema's int().nonnegative() (safe integers only: no stricter is needed, none looser is taken). */
const count = (v: unknown): boolean => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
/** A finite number from 0. */
const amount = (v: unknown): boolean => typeof v === "number" && Number.isFinite(v) && v >= 0;

const fingerprint = (v: unknown): boolean => typeof v === "string" && FINGERPRINT.test(v);

function quickPrints(p: unknown): boolean {
  if (!isPlain(p) || !onlyKeys(p, PRINT_KEYS) || !fingerprint(p.window)) return false;
  const sections = p.sections;
  return isPlain(sections) && onlyKeys(sections, SECTIONS) && Object.values(sections).every(fingerprint);
}

/** The keys of each object quickEvent takes, in the order the schema's parse gives them. */
const USER_ORDER = Object.keys(UserMessage.shape);
const ASSISTANT_ORDER = Object.keys(AssistantMessage.shape);
const USAGE_ORDER = Object.keys(Usage.shape);
const PRINTS_ORDER = Object.keys(PromptPrints.shape);

function inOrder(o: Record<string, unknown>, order: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of order) if (o[k] !== undefined) out[k] = o[k];
  return out;
}

/**
 * The event as one line of JSON, as `JSON.stringify(Event.parse(event))` makes it (the keys of each
 * object in the schema's order, a record's as given), when quickEvent takes it; else undefined, and
 * the schema is to be asked. So an event written through it is the same bytes as one written through
 * the schema (a differential test holds it to that), without the schema's first use in a process
 * (some milliseconds, as zod compiles its checks).
 */
export function quickEventText(event: unknown): string | undefined {
  if (!quickEvent(event)) return undefined;
  const e = event as Record<string, unknown>;
  const copy = inOrder(e, e.role === "user" ? USER_ORDER : ASSISTANT_ORDER);
  if (isPlain(copy.usage)) copy.usage = inOrder(copy.usage, USAGE_ORDER);
  if (isPlain(copy.prompt)) copy.prompt = inOrder(copy.prompt, PRINTS_ORDER);
  return JSON.stringify(copy);
}

/** An event with the number its file is named by. */
export interface Numbered<E = Event> {
  n: number;
  event: E;
}
