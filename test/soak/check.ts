// What must hold of an agent's conversations however its daemons died, read from the disk alone:
// events numbered 1..N with nothing else numbered, each file whole and valid, every call answered (by
// an event, or as unanswered in the next request), every acknowledged turn kept, and the copy for
// people (derived, and made again when a kill left it behind) holding each answer once, in order.
import { existsSync, lstatSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { z } from "zod";
import { Event, type Event as EventT } from "../../protocol/index.js";
import { eventName, eventNumber, WINDOW_FILE } from "../../store/index.js";
import { UNANSWERED } from "../../turn/prompt.js";
import type { RecordedRequest } from "../model-server.js";
import { answerText, callIdsOf, markerOf, messagesOf, promptText } from "./model.js";
import type { Ack } from "./worker.js";

export interface Conversation {
  thread: string;
  /** Event n is at index n - 1. */
  events: EventT[];
  /** Temp files a write cut short left behind (never numbered, never read). */
  temps: number;
  /** Lock holders (store/lock.ts) left behind: a killed process's, not removed by a process after it. */
  holders: number;
  /** Each holder left: its name, size, names and age, for the violation's message. */
  holdersLeft: string[];
}

/** Reads a conversation's folder, adding to `violations` what breaks the numbering or a file. */
export function readConversation(dir: string, thread: string, violations: string[]): Conversation {
  const numbers: number[] = [];
  let temps = 0;
  const holdersLeft: string[] = [];
  for (const name of readdirSync(dir)) {
    if (name.startsWith(".tmp-")) temps++;
    if (name.startsWith(".holder-")) holdersLeft.push(describeHolder(dir, thread, name));
    if (!/^\d/.test(name)) continue;
    const n = eventNumber(name);
    if (n === undefined) violations.push(`${thread}/${name}: numbered, but not an event's name`);
    else numbers.push(n);
  }
  numbers.sort((a, b) => a - b);
  const gaps = numbers.filter((n, i) => n !== i + 1);
  if (gaps.length > 0) violations.push(`${thread}: events are not numbered 1..${numbers.length}: first out of place ${gaps[0]}`);

  const events: EventT[] = [];
  for (const n of numbers) {
    const name = join(dir, eventName(n));
    const text = readFileSync(name, "utf8");
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch (e) {
      violations.push(`${thread}/${n}: not whole JSON: ${(e as Error).message}`);
      continue;
    }
    const parsed = Event.safeParse(raw);
    if (!parsed.success) violations.push(`${thread}/${n}: fails the Event schema: ${parsed.error.issues[0]?.message ?? ""}`);
    else if (!text.endsWith("\n")) violations.push(`${thread}/${n}: not whole (no final newline)`);
    else events.push(parsed.data);
  }
  return { thread, events, temps, holders: holdersLeft.length, holdersLeft };
}

/** A holder left, as a violation names it: its name, its size and names, its age, its text. */
function describeHolder(dir: string, thread: string, name: string): string {
  try {
    const st = lstatSync(join(dir, name));
    const text = st.isFile() && st.size <= 4096 ? JSON.stringify(readFileSync(join(dir, name), "utf8")) : "(not read)";
    return `${thread}/${name}: ${st.size} bytes, ${st.nlink} names, ${Math.round(Date.now() - st.mtimeMs)} ms old, ${text}`;
  } catch (e) {
    return `${thread}/${name}: ${(e as Error).message}`;
  }
}

export interface CallFigures {
  calls: number;
  /** Answered by a tool_result event. */
  answered: number;
  /** Left without one, and answered as unanswered in the conversation's next request. */
  unanswered: number;
}

/**
 * Each call of the conversation has a tool_result after it, or the next request the model got for
 * the conversation after the one the call was made in answers it as unanswered: a tool message, or,
 * when that request offered no tools, the call and its answer as text.
 */
export function checkCalls(
  conv: Conversation,
  requests: readonly RecordedRequest[],
  madeIn: ReadonlyMap<string, number>,
  violations: string[],
): CallFigures {
  const figures: CallFigures = { calls: 0, answered: 0, unanswered: 0 };
  const called = new Set<string>();
  conv.events.forEach((event, i) => {
    if (event.kind === "tool_result" && !called.has(event.call_id)) violations.push(`${conv.thread}/${i + 1}: answers call ${event.call_id}, made by no earlier event`);
    if (event.kind !== "message" || event.role !== "assistant") return;
    for (const call of event.tool_calls ?? []) {
      called.add(call.id);
      figures.calls++;
      if (conv.events.some((e, j) => j > i && e.kind === "tool_result" && e.call_id === call.id)) {
        figures.answered++;
        continue;
      }
      const made = madeIn.get(call.id);
      if (made === undefined) {
        violations.push(`${conv.thread}/${i + 1}: call ${call.id} was never made by the model`);
        continue;
      }
      const next = requests.slice(made + 1).find((r) => markerOf(r)?.thread === conv.thread);
      if (!next) {
        violations.push(`${conv.thread}/${i + 1}: call ${call.id} has no answer and the model was never asked again`);
        continue;
      }
      const asText = `[called ${call.name} ${call.arguments}]\n[${call.name} answered: ${UNANSWERED}]`;
      const messages = messagesOf(next);
      const answered = messages.some(
        (m) =>
          (m.role === "tool" && m.tool_call_id === call.id && m.content === UNANSWERED) ||
          (m.role === "assistant" && typeof m.content === "string" && m.content.includes(asText)),
      );
      if (answered) figures.unanswered++;
      else {
        const sent = messages.some((m) => m.role === "assistant" && callIdsOf(m).includes(call.id));
        violations.push(`${conv.thread}/${i + 1}: call ${call.id} has no answer event, and the next request ${sent ? "holds it without answering it as unanswered" : "doesn't hold it"}`);
      }
    }
  });
  return figures;
}

/**
 * No prompt is kept twice, and each acknowledged one is kept with its answer: its message, then,
 * before any other message of the owner's, the answer to it.
 */
export function checkAcks(conv: Conversation, acks: readonly Ack[], violations: string[]): void {
  const users = new Map<string, number[]>();
  conv.events.forEach((e, i) => {
    if (e.kind === "message" && e.role === "user") users.set(e.text, [...(users.get(e.text) ?? []), i]);
  });
  for (const [text, at] of users) if (at.length > 1) violations.push(`${conv.thread}: the prompt "${text}" is kept ${at.length} times`);
  for (const ack of acks) {
    if (ack.thread !== conv.thread) continue;
    const label = `${conv.thread} #${ack.k}`;
    if (ack.stopReason !== "end_turn") violations.push(`${label}: acknowledged with stop reason ${ack.stopReason}, not end_turn`);
    const at = users.get(promptText(ack.thread, ack.k))?.[0];
    if (at === undefined) {
      violations.push(`${label}: acknowledged, but its message is not on disk`);
      continue;
    }
    const want = answerText(ack.thread, ack.k);
    let found = false;
    for (const e of conv.events.slice(at + 1)) {
      if (e.kind !== "message") continue;
      if (e.role === "user") break;
      if (e.text === want && e.stop === "end_turn") found = true;
    }
    if (!found) violations.push(`${label}: acknowledged, but its answer is not on disk after its message`);
  }
}

/**
 * After a turn that ended well, the copy holds every answer of the agent's (an assistant message with
 * text), each once and in order, and ends with the last: what a kill left out was added or made again.
 */
export function checkTranscript(dir: string, conv: Conversation, violations: string[]): void {
  const path = join(dir, "transcript.md");
  const answers = conv.events.flatMap((e, i) => (e.kind === "message" && e.role === "assistant" && e.text.trim() ? [i + 1] : []));
  const text = existsSync(path) ? readFileSync(path, "utf8") : "";
  const held = [...text.matchAll(/<!-- answer (\d+) -->/g)].map((m) => Number(m[1]));
  if (held.join(",") === answers.join(",")) return;
  const first = held.findIndex((n, i) => n !== answers[i]);
  violations.push(
    `${conv.thread}/transcript.md: holds ${held.length} answers for ${answers.length}; first out of place: ${first < 0 ? `answer ${answers[held.length]} missing at the end` : `${held[first]} where ${answers[first] ?? "none"} belongs`}`,
  );
}

/**
 * The window's events file (window.jsonl: derived, made again or added to after each answer, maybe
 * left by a kill cut short or behind the events) holds, up to its first line that is not whole, the
 * events of their files at their numbers, one after another: nothing a fresh process would read
 * from it differs from the events on disk.
 */
export function checkWindowFile(dir: string, conv: Conversation, violations: string[]): void {
  const path = join(dir, WINDOW_FILE);
  const st = lstatSync(path, { throwIfNoEntry: false });
  if (!st?.isFile()) return;
  let expected: number | undefined;
  for (const line of readFileSync(path, "utf8").split("\n")) {
    let parsed: z.infer<typeof WindowLine>;
    try {
      parsed = WindowLine.parse(JSON.parse(line));
    } catch {
      // A line cut short ends what is read of it: its events are read from their files.
      return;
    }
    const [n, event] = parsed;
    if (expected !== undefined && n !== expected) return;
    expected = n + 1;
    if (!isDeepStrictEqual(event, conv.events[n - 1])) {
      violations.push(`${conv.thread}/window.jsonl: its line of event ${n} is not that event's file`);
      return;
    }
  }
}

const WindowLine = z.tuple([z.number().int().positive(), z.unknown()]);

