// `_meta.link`: Link's extensions on ACP requests and responses (DESIGN.md "ACP mapping").
import { basename } from "node:path";
import { z } from "zod";
import { From, Thread, Verbosity, describeIssues } from "../protocol/index.js";
import type { AgentRef } from "../store/index.js";

export { INITIALIZE_META, NOT_TEXT_METHOD, OVERSIZED_METHOD, TOO_DEEP_METHOD } from "./initialize.js";

const name = z.string().min(1).max(256);

// Unknown keys are dropped rather than refused: a newer Link may send fields this harness doesn't know yet.

/** session/new: which agent, and which conversation the session is. */
export const NewSessionLink = z.object({
  agent: name.optional(),
  thread: Thread.optional(),
  channel: name.optional(),
  group: name.optional(),
  /** A subagent's list (Link-Tools): narrows the conversation's tools, never widens them. */
  tools: z.array(z.string().min(1)).optional(),
});
export type NewSessionLink = z.infer<typeof NewSessionLink>;

/** session/load, session/resume and every other session request: only the agent may be named. */
export const SessionLink = z.object({ agent: name.optional() });

/** Whether an event can hold the time: its UTC form (what the event keeps) has a year from 0000 to 9999. */
function holdable(time: string): boolean {
  const ms = Date.parse(time);
  return Number.isFinite(ms) && /^\d{4}-/.test(new Date(ms).toISOString());
}

/** When a message was sent: ISO 8601 with an offset, and a time an event can hold. */
const MessageTime = z.iso.datetime({ offset: true }).refine(holdable, "must be a time an event can hold: a year from 0000 to 9999 in UTC");

/** session/prompt: who the message is from (left out, the owner), where and when, and the chat's verbosity. */
export const PromptLink = z.object({
  agent: name.optional(),
  from: From.optional(),
  channel: name.optional(),
  /** A group's id: the message is the group's conversation's, `<channel>-<group>`, whatever session it came on. */
  group: name.optional(),
  time: MessageTime.optional(),
  verbosity: Verbosity.optional(),
});
export type PromptLink = z.infer<typeof PromptLink>;

/** Params this agent refuses (a `_meta.link` that fails its schema, an option it hasn't): answered -32602. */
export class ParamsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ParamsError";
  }
}

/**
 * The name of the agent this process serves: the name of its own folder, `--agent`'s last part.
 * A process serves one agent, and knows no other name of it (Link's SharedAgents and Bind, which
 * name it, are for `--agents` and `--blank`, not built yet).
 */
export function servedAgent(agent: AgentRef): string {
  return basename(agent.dir);
}

/** What each schema made of a request with no `_meta.link`. */
const unlinked = new WeakMap<z.ZodType, unknown>();

/**
 * Parses `_meta.link` of a request's params; absent is the same as `{}`. Its `agent`, when given,
 * must be the agent this process serves (`served`): a request for another is refused, never
 * answered as this one.
 */
export function parseLink<S extends z.ZodType<{ agent?: string | undefined }>>(
  schema: S,
  meta: Record<string, unknown> | null | undefined,
  served: string | readonly string[],
): z.infer<S> {
  const raw = meta?.link ?? undefined;
  // None: what `{}` parses to, the same each time, parsed once for each schema.
  if (raw === undefined) {
    const known = unlinked.get(schema);
    if (known !== undefined) return known as z.infer<S>;
    const none = parseLink(schema, { link: {} }, served);
    Object.freeze(none);
    unlinked.set(schema, none);
    return none;
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new ParamsError(`_meta.link: ${describeIssues(parsed.error)}`);
  const asked = parsed.data.agent;
  const names = typeof served === "string" ? [served] : served;
  if (asked !== undefined && !names.includes(asked)) {
    throw new ParamsError(`_meta.link.agent: this connection serves the agent ${JSON.stringify(names[0])} alone, not ${JSON.stringify(asked)}`);
  }
  return parsed.data;
}
