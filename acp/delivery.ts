// Delivery and recovery of answers (DESIGN.md `_link/recover`): an answer is delivered once its
// `session/prompt` answer was written to the client. Until then its prompt's owed file stays in the
// conversation's folder (store/owed.ts); `_link/recover` hands over the answer of each owed file no
// live process holds, once, and removes the file once that answer in turn was written.
import { randomBytes } from "node:crypto";
import { EVENT_KINDS, type Event, type Numbered, type RecoveredAnswer } from "../protocol/index.js";
import { claimOwed, listOwed, messageTag, owedBase, owedName, owedWriterGone, readEventsFrom, removeOwed, writeOwed, type AgentRef, type ConversationPaths, type Owed } from "../store/index.js";
import { chatMap, isPlain, sessionIdOf } from "../turn/chat.js";
import type { Logger } from "./deps.js";
import type { Owing } from "./turns.js";

/** Owed files of this process's prompts still being answered: no recovery hands them over. */
const live = new Set<string>();
/** Owed files a recovery handed over, until its answer was written (then removed) or not (then owed again). */
const handed = new Set<string>();

/**
 * A prompt's debt: marked where its turn wrote it (the owed file made then), and settled once its
 * answer was written to the client, else left for a recovery.
 */
export interface Debt extends Owing {
  /** `written` tells whether the prompt's answer reached the client. */
  settle(written: Promise<boolean>): void;
}

/** Where this process's owed files' ids start: random, so a later process given the same pid names its own apart. */
let owedIds = randomBytes(8).readBigUInt64BE();

/**
 * Owes the prompt's answer. Its owed file is written once the turn that answers it says where it
 * wrote the message (`mark`: the last event before it, read under the conversation's lock), and
 * written again should a message that steers the turn come after it: the turn's last answer is
 * theirs together. A prompt waiting behind another turn owes nothing until its own turn takes it.
 * A mark that is only a name (one more of the lock's holder, or the one before renamed) is made at
 * once, before the turn's request goes out: a few microseconds, where made once the request is on
 * its way it waited for the folder's own lock, held by the files the turn then makes in the thread
 * pool, its thread spinning (about a third of a millisecond a turn, measured on ext4). One that
 * needs a file of its own is made at the next pass of the event loop, once the request is on its
 * way (making a file costs a disk a quarter of a millisecond and more, which the request needn't
 * wait for), and long before any answer can come back to be written. A folder that can't take it
 * costs only its recovery.
 */
export function owe(conv: ConversationPaths, log: Logger): Debt {
  // The next id of the process's own: random bytes drawn for each cost a system call a prompt.
  owedIds = BigInt.asUintN(64, owedIds + 1n);
  const name = owedName(owedIds.toString(16).padStart(16, "0"));
  const path = `${conv.dir}/${name}`;
  live.add(path);
  /** The name it is owed under (its mark in it): each write resolves it, one that fails as the write before it left it. */
  let made = Promise.resolve<string | undefined>(undefined);
  /** The paths it was written through: the folder the turn's lock holds, while it holds it. */
  let where = conv;
  let settled = false;
  return {
    mark(after, through, time) {
      if (settled) return;
      const tag = time === undefined ? undefined : messageTag(time);
      const before = made;
      const failed = (e: unknown, previous: string | undefined): string | undefined => {
        log.warn("the prompt's answer can't be recovered should it not reach the client", { thread: conv.thread, error: (e as Error).message });
        return previous;
      };
      made = before.then((previous) => {
        // Through the folder the turn's lock holds, while it holds it: not one opened for it alone.
        where = through.dir === conv.dir ? through : conv;
        try {
          const named = writeOwed(where, name, after, previous, true, tag);
          if (named !== undefined) return named;
        } catch (e) {
          return failed(e, previous);
        }
        return new Promise<string | undefined>((resolve) =>
          setImmediate(() => {
            try {
              resolve(writeOwed(where, name, after, previous, false, tag));
            } catch (e) {
              resolve(failed(e, previous));
            }
          }),
        );
      });
    },
    settle(written) {
      settled = true;
      void Promise.all([written, made]).then(([ok, owed]) => {
        live.delete(path);
        // Through the turn's folder while its lock still holds it (the answer is written before
        // the lock is let go), else through one opened for it.
        if (ok && owed !== undefined) removeOwed(where, owed);
      });
    },
  };
}

/**
 * The answer of the turn that wrote a prompt's message after event `after`: its last answer with
 * text, once the turn finished (a final answer, one that calls no tool). A turn that failed, was
 * cancelled or never finished has none; nor has a prompt whose message (`tag`, its messageTag, where
 * its mark has one) is not the one there: its process was killed before the message was on disk,
 * and another process's turn wrote its own at that number.
 */
export function answerAfter(conv: ConversationPaths, after: number, tag?: string): Numbered | undefined {
  let last: Numbered | undefined;
  // A command written before the message by a writer that takes no lock (a model set meanwhile) is
  // not the turn's; anything else there means the message was never written.
  let asked = false;
  for (const e of readEventsFrom(conv, after + 1)) {
    const event: Event = e.event;
    if (!asked) {
      if (event.kind === EVENT_KINDS.command) continue;
      if (event.kind !== EVENT_KINDS.message || event.role !== "user") return undefined;
      if (tag !== undefined && messageTag(event.time) !== tag) return undefined;
      asked = true;
      continue;
    }
    // A turn marks its prompts again at each message it writes, so a message after the marked one
    // is another turn's: the one this prompt's was killed in never answered it, and the next
    // process's turn answers its own prompt, delivered to that prompt's client.
    if (event.kind === EVENT_KINDS.message && event.role === "user") return undefined;
    // A choice written without the lock (another session's /model:set) is no end of the turn.
    if (event.kind === EVENT_KINDS.command && (event.name === "/model:set" || event.name === "/verbosity:set")) continue;
    if (event.kind === EVENT_KINDS.command || event.kind === EVENT_KINDS.failure) return undefined;
    if (event.kind !== EVENT_KINDS.message || event.role !== "assistant") continue;
    if (event.text.trim()) last = e;
    if (event.stop === "tool_calls") continue;
    return event.stop === "cancelled" ? undefined : last;
  }
  return undefined;
}

/**
 * The session an answer of the chat `thread` is of: the thread, or in a chat of several
 * conversations `<thread>~<conversation>`, the one whose own events hold it (the thread alone names
 * whichever the chat's current one is now, not the one the prompt was answered in).
 */
function sessionOf(conv: ConversationPaths, thread: string, n: number): string {
  const events = readEventsFrom(conv, 1);
  if (isPlain(events)) return thread;
  for (const [name, own] of chatMap(events).own) if (own.some((e) => e.n === n)) return sessionIdOf(thread, name);
  return thread;
}

/**
 * The most text of answers one answer to `_link/recover` carries, in characters: about one answer as
 * long as a model's may be (turn/model.ts), and far under what a client reads in one message.
 */
export const RECOVERED_TEXT_MAX = 4 * 1024 * 1024;

/**
 * `_link/recover`: each answer owed by a process that is gone (or by this one, whose client left),
 * once; each owed file taken is removed once this answer was written (`written`), else owed again.
 * Answers past `max` characters in all (the first always goes) stay owed, for the next call: `more`.
 */
export function recover(agent: AgentRef, written: Promise<boolean>, log: Logger, max = RECOVERED_TEXT_MAX): { answers: RecoveredAnswer[]; more: boolean } {
  const { owed, faults } = listOwed(agent);
  for (const fault of faults) log.warn("an owed answer's file could not be read", { error: fault });
  const answers: RecoveredAnswer[] = [];
  const given = new Set<string>();
  const taken: Owed[] = [];
  let size = 0;
  let more = false;
  for (const listed of owed.sort((a, b) => a.thread.localeCompare(b.thread) || a.after - b.after)) {
    const listedPath = `${listed.conv.dir}/${owedBase(listed.name)}`;
    if (live.has(listedPath) || handed.has(listedPath)) continue;
    // Another live process owes it (of another machine, one whose file is fresh): its own client may still get it.
    if (!owedWriterGone(listed)) continue;
    // A gone process's, taken for this one first: another process's recovery may look at it too.
    let o: Owed | undefined;
    try {
      o = claimOwed(listed);
    } catch (e) {
      log.warn("an owed answer's file could not be taken", { thread: listed.thread, error: (e as Error).message });
      continue;
    }
    if (o === undefined) continue;
    const path = `${o.conv.dir}/${owedBase(o.name)}`;
    let found: Numbered | undefined;
    try {
      found = answerAfter(o.conv, o.after, o.tag);
    } catch (e) {
      log.warn("an owed answer's conversation could not be read", { thread: o.thread, error: (e as Error).message });
      continue;
    }
    const answer = found?.event.kind === EVENT_KINDS.message ? { n: found.n, text: found.event.text, time: found.event.time } : undefined;
    // Two prompts of one turn (one steered it) owe one answer.
    const key = answer ? `${o.thread}\n${answer.n}` : undefined;
    const fresh = answer !== undefined && key !== undefined && !given.has(key);
    // Past what one answer to the call carries (the first always goes): owed still, for the next call.
    if (fresh && answers.length > 0 && size + answer.text.length > max) {
      more = true;
      continue;
    }
    handed.add(path);
    taken.push(o);
    if (!fresh) continue;
    given.add(key);
    size += answer.text.length;
    answers.push({ sessionId: sessionOf(o.conv, o.thread, answer.n), event: answer.n, text: answer.text, time: answer.time });
  }
  void written.then((ok) => {
    for (const o of taken) {
      handed.delete(`${o.conv.dir}/${owedBase(o.name)}`);
      if (ok) removeOwed(o.conv, o.name);
    }
  });
  return { answers, more };
}
