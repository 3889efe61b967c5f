// Running one round of tool calls: CALLS_AT_ONCE at a time, each answer kept up to 32 KiB and written as it comes.
import { nestsWithin, THINKING_DEPTH_MAX, type ToolCall, type ToolResult } from "../protocol/index.js";
import type { ToolBox, ToolMedia } from "./tools.js";
import { wellFormed } from "./wellformed.js";

export const ANSWER_MAX_BYTES = 32 * 1024;
/**
 * The most characters of images and links the answers of one round show the client (an image is at
 * most 10 MiB): past it, an answer's images, then its links, are left out of what the client is
 * shown (its text says they were there). A round of a hundred calls each showing a large image held
 * and sent a gigabyte.
 */
export const ROUND_MEDIA_MAX = 32 * 1024 * 1024;

/**
 * The most calls of one round that run at once; the rest each start as one ends. A round may hold
 * 128 calls, and each answer may be 16 MiB before it is cut (an HTTP tool's), all held at once:
 * gigabytes for one turn, where eight at a time hold at most some hundreds of megabytes.
 */
export const CALLS_AT_ONCE = 8;

/** The characters of an answer's images, or of its links (their address, name and type). */
const mediaChars = (media: readonly ToolMedia[], type: ToolMedia["type"]): number =>
  media.reduce((sum, m) => sum + (m.type !== type ? 0 : m.type === "image" ? m.data.length : m.uri.length + m.name.length + (m.mimeType?.length ?? 0)), 0);

/** Cuts an answer to 32 KiB of UTF-8, saying so where it's cut. */
export function cutAnswer(text: string): { text: string; truncated: boolean } {
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes <= ANSWER_MAX_BYTES) return { text, truncated: false };
  const note = `\n[cut: the answer was ${bytes} bytes; only the first 32 KiB are kept]`;
  const buf = Buffer.from(text, "utf8").subarray(0, ANSWER_MAX_BYTES - Buffer.byteLength(note));
  // Drop a character split by the cut.
  const kept = buf.toString("utf8").replace(/\uFFFD$/, "");
  return { text: kept + note, truncated: true };
}

function parseArguments(raw: string): Record<string, unknown> | string {
  let value: unknown;
  try {
    value = JSON.parse(raw || "{}");
  } catch (e) {
    return `the call's arguments are not valid JSON: ${(e as Error).message}`;
  }
  if (!value || typeof value !== "object" || Array.isArray(value)) return "the call's arguments must be a JSON object";
  if (!nestsWithin(value, THINKING_DEPTH_MAX)) return `the call's arguments nest deeper than ${THINKING_DEPTH_MAX} arrays and objects`;
  return value as Record<string, unknown>;
}

export interface CallAnswer {
  call: ToolCall;
  result: ToolResult;
  /** What the tool showed beside its text, for the client (never kept, never sent to the model). */
  media?: ToolMedia[];
}

/**
 * Runs the calls of one round, CALLS_AT_ONCE at a time, in the order the model made them. Each answer
 * is handed to `onAnswer` as soon as it comes, in the order they finish, so it's written as it
 * happens. Never throws for a tool's failure.
 */
export async function runCalls(
  calls: readonly ToolCall[],
  box: ToolBox | undefined,
  signal: AbortSignal | undefined,
  onAnswer: (answer: CallAnswer) => Promise<void> | void,
): Promise<void> {
  let shown = 0;
  let next = 0;
  const one = async (call: ToolCall): Promise<void> => {
    const args = parseArguments(call.arguments);
    let text: string;
    let error: boolean;
    let media: ToolMedia[] | undefined;
    if (typeof args === "string") [text, error] = [args, true];
    else if (!box) [text, error] = [`there is no tool ${call.name}`, true];
    else if (signal?.aborted) [text, error] = ["", true];
    else {
      try {
        const answer = await box.call(call.name, args, signal);
        [text, error, media] = [answer.text, answer.error, answer.media];
      } catch (e) {
        [text, error] = [`the call failed: ${(e as Error).message}`, true];
      }
    }
    if (signal?.aborted) [text, error, media] = ["cancelled: the turn was stopped before the tool answered", true, undefined];
    // Images, then links, each kept while the round's media fit (a link's address may be megabytes).
    for (const type of ["image", "resource_link"] as const) {
      if (!media?.length) break;
      const chars = mediaChars(media, type);
      if (shown + chars > ROUND_MEDIA_MAX) media = media.filter((m) => m.type !== type);
      else shown += chars;
    }
    // A lone surrogate kept would go back to the model at every later turn, which a provider refuses.
    const cut = cutAnswer(wellFormed(text));
    await onAnswer({
      call,
      result: {
        v: 1,
        kind: "tool_result",
        time: new Date().toISOString(),
        call_id: call.id,
        tool: call.name,
        text: cut.text,
        error,
        ...(cut.truncated ? { truncated: true } : {}),
      },
      ...(media?.length ? { media } : {}),
    });
  };
  // Each runner takes the next call not yet begun, until none is left.
  const runner = async (): Promise<void> => {
    for (let call = calls[next++]; call !== undefined; call = calls[next++]) await one(call);
  };
  await Promise.all(Array.from({ length: Math.min(CALLS_AT_ONCE, calls.length) }, runner));
}
