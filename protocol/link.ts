// Link's extension methods on ACP: the proof and the recovery (DESIGN.md "ACP mapping").
import { z } from "zod";

/** The fewest bytes a challenge may have: shorter ones could be guessed or repeated by chance. */
export const CHALLENGE_MIN_BYTES = 16;
/** The most bytes a challenge may have: each answered one is remembered for the process's life. */
export const CHALLENGE_MAX_BYTES = 1024;
/** A hex HMAC-SHA256: 64 hex digits. */
const Hmac = z.string().regex(/^[0-9a-fA-F]{64}$/, "must be 64 hex digits (an HMAC-SHA256)");

const bytes = (s: string) => Buffer.byteLength(s, "utf8");

/**
 * `_link/prove`: a challenge for this process to answer with the key, an answer to the nonce this
 * connection was last given (the client's own proof), or both.
 */
export const ProveParams = z
  .object({
    challenge: z
      .string()
      .refine((s) => bytes(s) >= CHALLENGE_MIN_BYTES, `must be at least ${CHALLENGE_MIN_BYTES} bytes`)
      .refine((s) => bytes(s) <= CHALLENGE_MAX_BYTES, `must be at most ${CHALLENGE_MAX_BYTES} bytes`)
      .optional(),
    answer: Hmac.optional(),
  })
  .refine((p) => p.challenge !== undefined || p.answer !== undefined, "needs a challenge, an answer, or both");
export type ProveParams = z.infer<typeof ProveParams>;

export const ProveResult = z
  .object({
    /** Hex HMAC-SHA256 of the challenge's UTF-8 bytes with the key. */
    hmac: z.string().optional(),
    /** A fresh nonce for the client to answer; left out once the connection has proved itself. */
    nonce: z.string().optional(),
    /** Whether the connection has proved itself. */
    proved: z.boolean(),
  })
  .strict();
export type ProveResult = z.infer<typeof ProveResult>;

/** `_link/recover`: nothing to give yet. */
export const RecoverParams = z.object({}).loose();

export const RecoveredAnswer = z
  .object({ sessionId: z.string(), event: z.number().int().positive(), text: z.string(), time: z.string() })
  .strict();
/** `more`: answers were left owed, past what one answer to it carries: they come with the next call. */
export const RecoverResult = z.object({ answers: z.array(RecoveredAnswer), more: z.literal(true).optional() }).strict();
export type RecoveredAnswer = z.infer<typeof RecoveredAnswer>;
export type RecoverResult = z.infer<typeof RecoverResult>;

/**
 * An owed file's mark (store/owed.ts), where it is a file of its own: the conversation's last event
 * before a prompt whose answer is owed; `host` and `token`, its process's (its lock's holder's),
 * where a version since 2026-12-05 wrote it.
 */
export const OwedMark = z.object({ v: z.literal(1), after: z.number().int().nonnegative(), time: z.string(), host: z.string().optional(), token: z.string().optional() }).strict();
export type OwedMark = z.infer<typeof OwedMark>;
