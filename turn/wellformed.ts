// Text made well-formed UTF-16 before it reaches a model. A lone surrogate (half of a pair: from a
// tool's answer, a description, a prompt, an event written before this check) is written by
// JSON.stringify as a `\udXXX` escape, which DeepSeek, OpenAI and Anthropic refuse with a 400 — at
// every later turn of the conversation that holds it. Each is made U+FFFD, as toWellFormed does.

/** Whether a UTF-16 code unit is the first half of a surrogate pair: text cut after it cuts a character in two. */
export const isHighSurrogate = (c: number): boolean => c >= 0xd800 && c <= 0xdbff;

/** `text` with each lone surrogate made U+FFFD. */
export function wellFormed(text: string): string {
  return text.isWellFormed() ? text : text.toWellFormed();
}

/**
 * A run of backslashes then `udXXX`, a surrogate's code: an escape when the run is odd, else an
 * escaped backslash then text (`\\ud800`). JSON.stringify writes a surrogate of a pair as it is, and
 * a lone one as such an escape, in lower case.
 */
const LONE_ESCAPES = /(\\+)ud[89a-f][0-9a-f]{2}/g;

/**
 * JSON written by JSON.stringify, each lone surrogate's escape made U+FFFD: what JSON.stringify
 * writes of the value made well-formed, and the same string when there is none. Every request's
 * body goes through it: with none, it costs one scan for `\ud` (half a regular expression's), which
 * JSON.stringify writes only for a lone surrogate or after an escaped backslash.
 */
export function wellFormedJson(json: string): string {
  if (!json.includes("\\ud")) return json;
  return json.replace(LONE_ESCAPES, (match: string, backslashes: string) => (backslashes.length % 2 === 1 ? `${backslashes.slice(1)}\ufffd` : match));
}
