// The soak's model: to a new message it answers with a call of `everything__echo`, then, once the
// call is answered, with its answer, each streamed in a few chunks with small delays so a kill can
// land mid-stream. It remembers which request each call was made in, for the checks.
import { z } from "zod";
import type { AnswerReply, RecordedRequest, ReplyFn } from "../model-server.js";
import type { Rng } from "./rng.js";

/** A prompt's text starts with its marker: the conversation and the prompt's number. */
export const promptText = (thread: string, k: number): string => `[soak ${thread} #${k}] please echo this`;
const MARKER = /\[soak ([^\]\s]+) #(\d+)\]/;

/** The answer the model gives, once its call is answered, to the prompt with this marker. */
export const answerText = (thread: string, k: number): string => `answered ${thread} #${k}`;

export const ECHO = "everything__echo";

const Message = z.looseObject({ role: z.string(), content: z.unknown().optional(), tool_call_id: z.string().optional() });
const ToolCalls = z.array(z.looseObject({ id: z.string() }));

/** The request's messages, as the model reads them. */
export function messagesOf(request: RecordedRequest): z.infer<typeof Message>[] {
  return (request.body.messages ?? []).map((m) => Message.parse(m));
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p: unknown) => (typeof p === "object" && p && "text" in p ? String(p.text) : "")).join("");
  return "";
}

/** The conversation and prompt number of the request's last user message. */
export function markerOf(request: RecordedRequest): { thread: string; k: number } | undefined {
  const user = messagesOf(request).findLast((m) => m.role === "user");
  const m = MARKER.exec(textOf(user?.content));
  return m?.[1] && m[2] ? { thread: m[1], k: Number(m[2]) } : undefined;
}

/** The ids of the calls an assistant message of the request holds. */
export function callIdsOf(message: z.infer<typeof Message>): string[] {
  const parsed = ToolCalls.safeParse(message.tool_calls);
  return parsed.success ? parsed.data.map((c) => c.id) : [];
}

export interface ModelReport {
  /** A request came, its reply streams for about `ms`. */
  request(ms: number): void;
}

export class SoakModel {
  /** For each call id, the index in the server's requests of the request whose reply made the call. */
  readonly madeIn = new Map<string, number>();
  private serial = 0;

  constructor(
    private readonly rng: Rng,
    private readonly requests: readonly RecordedRequest[],
    private readonly report: ModelReport,
  ) {}

  readonly reply: ReplyFn = (request) => {
    const marker = markerOf(request);
    if (!marker) return { error: { status: 400, message: "the soak's model found no marker in the last user message" } };
    const timing = { chunks: 2 + this.rng.int(4), delayMs: this.rng.int(30), chunkDelayMs: this.rng.int(25) };
    this.report.request(timing.delayMs + (timing.chunks + 6) * timing.chunkDelayMs);
    const last = messagesOf(request).at(-1);
    // Anything after the user's message (a call's answer, or calls sent as text without tools) is the call round done.
    if (last?.role !== "user") return { text: answerText(marker.thread, marker.k), ...timing } satisfies AnswerReply;
    const id = `call-${marker.thread}-${marker.k}-${++this.serial}`;
    this.madeIn.set(id, this.requests.indexOf(request));
    return {
      text: `Echoing ${marker.thread} #${marker.k}.`,
      tool_calls: [{ id, name: ECHO, arguments: { message: `${marker.thread} #${marker.k}` } }],
      ...timing,
    } satisfies AnswerReply;
  };
}
