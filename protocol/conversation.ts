// Files derived from a conversation's events, and a subagent's tool list (DESIGN.md "The agent's folders").
import { z } from "zod";

/** window.json: how far the count got. Derived; rebuilt when missing, stale or made for another budget. */
export const WindowMark = z
  .object({
    v: z.literal(1),
    /** The event the window starts at (a user message, or the first after a /new). */
    event: z.number().int().positive(),
    /** That event's time, so a mark that belongs to other messages is found out. */
    time: z.string(),
    /** Rough tokens of the conversation (since its last /new) before that event. */
    tokens_before: z.number().int().nonnegative(),
    /** The conversation's share the mark was made for. */
    budget: z.number().int().positive(),
  })
  .strict();
export type WindowMark = z.infer<typeof WindowMark>;

/** tools.json: a subagent's narrowed tool list (Link-Tools). Narrows, never widens. */
export const ToolsList = z.object({ v: z.literal(1), tools: z.array(z.string()) }).strict();
export type ToolsList = z.infer<typeof ToolsList>;

/** A thread name: a conversation's folder. No `/`, `..`, NUL or leading dot; bounded length. */
export const THREAD_MAX = 128;
export const Thread = z
  .string()
  .min(1)
  .max(THREAD_MAX)
  .refine((s) => !s.startsWith("."), "must not start with a dot")
  .refine((s) => !/[/\\\0]/.test(s), "must not hold '/', '\\' or NUL")
  .refine((s) => !s.includes(".."), "must not hold '..'")
  .refine((s) => !/[\p{Cc}]/u.test(s), "must not hold control characters");
