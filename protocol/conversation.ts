// Files derived from a conversation's events, and a subagent's tool list (DESIGN.md "The agent's folders").
import { z } from "zod";
import { Verbosity } from "./settings.js";

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
    /** The conversation's model as its last /model:set before that event chose it. */
    model: z.string().optional(),
    /** The chat's verbosity as its last /verbosity:set before that event chose it. */
    verbosity: Verbosity.optional(),
    /** In a chat of several conversations, the one the mark counts (left out: a chat of one). */
    conversation: z.string().optional(),
  })
  .strict();
export type WindowMark = z.infer<typeof WindowMark>;

/** tools.json: a subagent's narrowed tool list (Link-Tools). Narrows, never widens. */
export const ToolsList = z.object({ v: z.literal(1), tools: z.array(z.string()) }).strict();
export type ToolsList = z.infer<typeof ToolsList>;

/**
 * Bidirectional controls (embeddings, overrides, isolates, marks): a name holding one reads other
 * than it is, `evil\u202Egpj.exe` shown as `evilexe.jpg`.
 */
const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/;

/** A thread name: a conversation's folder. No `/`, `..`, NUL, control or bidirectional control character, or leading dot; bounded length. */
export const THREAD_MAX = 128;
/** A folder's name is at most 255 bytes on the usual file systems (NAME_MAX). */
export const THREAD_MAX_BYTES = 255;
export const Thread = z
  .string()
  .min(1)
  .max(THREAD_MAX)
  .refine((s) => new TextEncoder().encode(s).length <= THREAD_MAX_BYTES, `must be at most ${THREAD_MAX_BYTES} bytes in UTF-8`)
  .refine((s) => !s.startsWith("."), "must not start with a dot")
  .refine((s) => !/[/\\\0]/.test(s), "must not hold '/', '\\' or NUL")
  .refine((s) => !s.includes(".."), "must not hold '..'")
  // A lone surrogate has no UTF-8 form: two such names would become one folder.
  .refine((s) => !/[\p{Cc}\p{Cs}]/u.test(s), "must not hold control characters or lone surrogates")
  .refine((s) => !BIDI_CONTROLS.test(s), "must not hold bidirectional control characters (U+202A to U+202E, U+2066 to U+2069, U+200E, U+200F, U+061C)");
