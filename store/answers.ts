// Reading a conversation's answers without reading every event whole: each file's head says what it
// is (an event is written as {"v":1,"time":…,"kind":…,"role":…, …}), and only an answer is read on
// and parsed. For what a conversation cost (`usage`), over conversations of any length.
import { existsSync } from "node:fs";
import { AssistantMessage, Event, StoreError, describeIssues } from "../protocol/index.js";
import { checkConversationLinks } from "./events.js";
import { isErrno, jsonFault, LIMITS, LinkRefused, readHead, readNoFollow } from "./files.js";
import type { ConversationPaths } from "./paths.js";

/** One event as the scan sees it: the start of a turn, an answer, or anything else. */
export type Scanned =
  | { n: number; kind: "turn"; time: string }
  | { n: number; kind: "answer"; answer: AssistantMessage }
  | { n: number; kind: "other"; time: string };

/** Enough of a file to hold its head, and most events whole. */
const HEAD_BYTES = 4096;
/** The head an event is written with; anything else is read whole and checked by its schema. */
const HEAD = /^\{"v":1,"time":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d))","kind":"(message|tool_result|command|failure)"(?:,"role":"(user|assistant)")?/;

/** An event whose head isn't the usual one, read whole and checked by its schema. */
function classify(n: number, path: string, text: string, answer: boolean): Scanned {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    // Never V8's own words, which quote the text.
    throw new StoreError(`event ${path} is not JSON: ${jsonFault(e, text)}`, path);
  }
  // An answer's own schema is quicker to check than the union of every kind.
  const parsed = (answer ? AssistantMessage : Event).safeParse(raw);
  if (!parsed.success) throw new StoreError(`event ${path} fails its schema: ${describeIssues(parsed.error)}`, path);
  const e = parsed.data;
  if (e.kind === "message" && e.role === "assistant") return { n, kind: "answer", answer: e };
  return e.kind === "message" ? { n, kind: "turn", time: e.time } : { n, kind: "other", time: e.time };
}

/** Event n as the scan sees it, or undefined when there is none. */
export function scanEvent(conv: ConversationPaths, n: number): Scanned | undefined {
  const path = conv.event(n);
  let head: { text: string; whole: boolean };
  try {
    head = readHead(path, HEAD_BYTES);
  } catch (e) {
    if (e instanceof StoreError) throw e;
    if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR")) return undefined;
    if (isErrno(e, "ELOOP")) throw new LinkRefused(path);
    throw new StoreError(`cannot read event ${path}: ${(e as Error).message}`, path);
  }
  const m = HEAD.exec(head.text);
  if (m && !(m[2] === "message" && m[3] === undefined)) {
    const time = m[1] ?? "";
    if (m[3] === "user") return { n, kind: "turn", time };
    if (m[3] !== "assistant") return { n, kind: "other", time };
  }
  const text = head.whole ? head.text : readNoFollow(path, { max: LIMITS.event });
  return classify(n, path, text, m?.[3] === "assistant");
}

/** The events from `from` on as the scan sees them, in order, until the first number not written. */
export function* scanEvents(conv: ConversationPaths, from: number): Generator<Scanned> {
  checkConversationLinks(conv);
  for (let n = Math.max(1, from); ; n++) {
    const e = scanEvent(conv, n);
    if (!e) return;
    yield e;
  }
}

/** The highest event number written, found by probing (a few dozen lookups, never a listing). */
export function lastWritten(conv: ConversationPaths): number {
  if (!existsSync(conv.event(1))) return 0;
  let high = 1;
  while (existsSync(conv.event(high * 2))) high *= 2;
  // Written: high; not written: high * 2. Numbers are written without gaps.
  let lo = high;
  let hi = high * 2;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (existsSync(conv.event(mid))) lo = mid;
    else hi = mid;
  }
  return lo;
}

/**
 * The first event at or after `since`, found by halving: events are numbered in the order they were
 * written, so their times rise with their numbers. Past the last, it is one more than the last.
 */
export function firstSince(conv: ConversationPaths, since: Date, last = lastWritten(conv)): number {
  let lo = 1;
  let hi = last + 1;
  const at = since.getTime();
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    const e = scanEvent(conv, mid);
    const time = e ? (e.kind === "answer" ? e.answer.time : e.time) : undefined;
    if (time === undefined || Date.parse(time) >= at) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
