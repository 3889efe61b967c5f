// The portable session form (man lnk-link-harness-session(5)): one conversation as any harness can
// read it. Its events are the conversation's own, in order, as Link Harness keeps them (events.ts):
// each message with its time, who it is from, the model that answered, its tool calls, their
// answers, its thinking and parts, and the command events. A fork's `event` is a position in the
// list (1 for the first event): events are numbered from 1 with no gap, and an import numbers them so.
import { z } from "zod";
import { Thread } from "./conversation.js";
import { Event } from "./events.js";

export const SESSION_FORM_VERSION = 1 as const;

export const SessionForm = z
  .object({
    /** The conversation's thread: its name where it was kept; an import keeps it when it is free. */
    thread: Thread,
    /** Its events in order, from the first. */
    events: z.array(Event),
  })
  .strict();
export type SessionForm = z.infer<typeof SessionForm>;

/** The session form as a JSON Schema (draft 2020-12), as man lnk-link-harness-session(5) prints it. */
export function sessionFormJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(SessionForm, { target: "draft-2020-12", unrepresentable: "any" }) as Record<string, unknown>;
}
