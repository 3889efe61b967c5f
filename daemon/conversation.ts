// `lnk-link-harness conversation [--agent DIR] THREAD [--json]`: one conversation for a person (who
// said what and when, tool calls and their answers shortened, commands as typed, thinking marked but
// never shown, parts named), or in the portable session form, as `_asp/export` gives it. Loaded only
// for this command.
import { existsSync } from "node:fs";
import { StoreError, type Event, type Numbered } from "../protocol/index.js";
import { eachEventFrom, protoKey, readEvent, withoutProtoKeys, writtenPast, type AgentRef, type ConversationPaths } from "../store/index.js";
import { chatMap, conversationEvents, isBegin } from "../turn/chat.js";
import { UsageError, agentRef, type AgentOptions } from "./cli.js";
import { oneLine, safe, stdoutChunks, type Output } from "./output.js";
import { namedSession } from "./thread-arg.js";

/**
 * A conversation as read for the command: every event checked, and kept by its number only, to be
 * read again as it is printed: a conversation of gigabytes is never held whole.
 */
export interface ReadNamed {
  conv: ConversationPaths;
  /** The session's thread: the chat's, or `<thread>~<name>`. */
  thread: string;
  /** What a person is shown: its events' numbers in the chat's log. */
  shown: number[];
  /** What its session gives: the commands that began a chat's conversations left out of one conversation's. */
  given: number[];
  /** A chat of several conversations: their names, in the order they began. */
  conversations?: string[];
  /** What of it could not be read (a missing number), or was not given (a key `__proto__`), said on stderr. */
  left?: string;
  /** Its session's bytes as printed (writeSessionJson), when asked. */
  bytes?: number;
}

/** What a chat's log is read as for its map: every event checked, only those that begin a conversation kept. */
const PASSED: Event = { v: 1, kind: "message", role: "user", text: "", time: "", header: "" };

/**
 * The conversation THREAD names, every event read and checked. A chat's folder gives its session as
 * `_asp/export` does; `<thread>~<name>` gives that conversation of the chat as a session of its own,
 * thread `<thread>~<name>`: its events as the chat reads them back (a fork's shared start, then its
 * own), without the commands that began the chat's conversations, which name events of the chat's
 * log. `pad`: its session's bytes as printed with it are counted too.
 */
export function readNamed(agent: AgentRef, arg: string, pad?: string): ReadNamed {
  if (!existsSync(agent.dir)) throw new UsageError(`no agent folder at ${agent.dir}`);
  const named = namedSession(agent, arg);
  const log: Numbered[] = [];
  let proto = 0;
  // A chat's own session gives every event: measured as it is read, rather than read once more.
  const whole = named.conversation === undefined && pad !== undefined;
  let bytes = 0;
  try {
    for (const e of eachEventFrom(named.conv)) {
      log.push(isBegin(e.event) ? e : { n: e.n, event: PASSED });
      if (protoKey(e.event) !== undefined) proto++;
      if (whole) bytes += Buffer.byteLength(eventJson(e.event, pad, log.length === 1));
    }
  } catch (e) {
    if (e instanceof StoreError) throw new StoreError(`cannot read conversation ${named.thread}: ${e.message}`, e.path);
    throw e;
  }
  const map = chatMap(log);
  let read: ReadNamed;
  if (named.conversation === undefined) {
    const all = log.map((e) => e.n);
    const names = [...map.conversations.keys()];
    read = {
      conv: named.conv,
      thread: named.thread,
      shown: all,
      given: all,
      ...(names.length > 1 ? { conversations: names } : {}),
      ...(writtenPast(named.conv, log.length) ? { left: `its events after number ${log.length + 1}, which is missing` } : {}),
    };
    if (proto > 0) read.left = [read.left, protoLeft(proto)].filter(Boolean).join("; ");
  } else {
    if (!map.conversations.has(named.conversation)) {
      throw new UsageError(`chat ${named.thread} has no conversation ${JSON.stringify(named.conversation)} (it has: ${[...map.conversations.keys()].join(", ")})`);
    }
    // A person reads the commands that began it as they were typed; the session leaves them out.
    const events = conversationEvents(map, named.conversation);
    read = { conv: named.conv, thread: arg, shown: events.map((e) => e.n), given: events.filter((e) => !isBegin(e.event)).map((e) => e.n) };
    if (proto > 0) read.left = protoLeft(proto);
  }
  if (whole) read.bytes = bytes + Buffer.byteLength(sessionJsonHead(read.thread, pad)) + Buffer.byteLength(sessionJsonTail(log.length > 0, pad));
  else if (pad !== undefined) {
    read.bytes = 0;
    for (const chunk of sessionJsonChunks(read, pad)) read.bytes += Buffer.byteLength(chunk);
  }
  return read;
}

/** What a session gives without: a key no State may hold (JSON.parse made it an own key; an import refuses it). */
const protoLeft = (n: number) => `the key "__proto__" of ${n} event${n === 1 ? "" : "s"} of the chat, which no State may hold`;

/** The events of `numbers`, read again one at a time (each was checked once already). */
function* eventsAt(conv: ConversationPaths, numbers: readonly number[]): Generator<Numbered> {
  for (const n of numbers) {
    const event = readEvent(conv, n, false);
    if (event === undefined) throw new StoreError(`event ${n} of ${conv.dir} is gone`, conv.event(n));
    yield { n, event };
  }
}

/** The session as `JSON.stringify(session, null, 2)` writes it, each line after `pad`, an event at a time. */
function* sessionJsonChunks(read: ReadNamed, pad: string): Generator<string> {
  yield sessionJsonHead(read.thread, pad);
  let first = true;
  for (const e of eventsAt(read.conv, read.given)) {
    yield eventJson(e.event, pad, first);
    first = false;
  }
  yield sessionJsonTail(!first, pad);
}

const sessionJsonHead = (thread: string, pad: string) => `${pad}{\n${pad}  "thread": ${JSON.stringify(thread)},\n${pad}  "events": [`;
const sessionJsonTail = (any: boolean, pad: string) => (any ? `\n${pad}  ]\n${pad}}` : `]\n${pad}}`);

/** One event of a session's list, as JSON.stringify(session, null, 2) writes it (without a key `__proto__`). */
function eventJson(event: Event, pad: string, first: boolean): string {
  const carried = withoutProtoKeys(event);
  return `${first ? "\n" : ",\n"}${pad}    ${JSON.stringify(carried, null, 2).replace(/\n/g, `\n${pad}    `)}`;
}

/** Writes the session (sessionJsonChunks), never as one string. */
export async function writeSessionJson(out: Output, read: ReadNamed, pad = ""): Promise<void> {
  for (const chunk of sessionJsonChunks(read, pad)) await out.write(chunk);
}

/** At most `max` characters and `lines` lines of a text, saying how much more there was. */
function shortened(text: string, max: number, lines = Number.POSITIVE_INFINITY): string {
  const kept = text.split("\n").slice(0, lines).join("\n").slice(0, max);
  const more = text.length - kept.length;
  return more > 0 ? `${kept}… (${more} more characters)` : kept;
}

/** How much of a tool's answer, and of a call's arguments, is shown. */
const ANSWER_CHARS = 600;
const ANSWER_LINES = 8;
const ARGUMENTS_CHARS = 200;

function when(time: string): string {
  const d = new Date(time);
  return Number.isNaN(d.getTime()) ? time : `${d.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

const seconds = (ms: number) => (ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`);

/** A part of a message by what it is: an image by its type and size, a document by its name. */
function partName(part: NonNullable<Extract<Event, { role: "user" }>["parts"]>[number]): string {
  const data = (url: string | undefined) => {
    const m = url === undefined ? null : /^data:([^;,]*)(;base64)?,/.exec(url);
    if (!m || url === undefined) return url === undefined ? "" : `, ${shortened(url, 80)}`;
    const body = url.length - m[0].length;
    const padding = url.endsWith("==") ? 2 : url.endsWith("=") ? 1 : 0;
    const bytes = m[2] ? Math.max(0, Math.floor((body * 3) / 4) - padding) : body;
    return `${m[1] ? `, ${m[1]}` : ""}, ${bytes} bytes`;
  };
  switch (part.type) {
    case "image_url":
      return `[image${oneLine(data(part.image_url.url))}]`;
    case "file":
      return `[document${part.file.filename !== undefined ? ` ${oneLine(part.file.filename)}` : ""}${oneLine(data(part.file.file_data))}]`;
    case "text":
      return `[text: ${oneLine(shortened(part.text, ARGUMENTS_CHARS))}]`;
    default: {
      const never: never = part;
      return `[${String(never)}]`;
    }
  }
}

/** A command as its canonical form says it. */
function commandLine(e: Extract<Event, { kind: "command" }>): string {
  switch (e.name) {
    case "/model:set":
      return `${e.name}${e.model !== undefined ? ` ${e.model}` : ""}`;
    case "/chat:fork":
      return `${e.name}${e.conversation !== undefined ? ` ${e.conversation}` : ""}${e.thread !== undefined ? `, from ${e.thread}${e.event !== undefined ? ` at event ${e.event}` : ""}` : ""}`;
    case "/chat:create":
    case "/chat:resume":
      return `${e.name}${e.conversation !== undefined ? ` ${e.conversation}` : ""}`;
    case "/verbosity:set":
      return `${e.name}${e.verbosity !== undefined ? ` ${e.verbosity}` : ""}`;
    case "/new":
    case "/stop":
      return e.name;
    default: {
      const never: never = e.name;
      return String(never);
    }
  }
}

/** Who a message or command is from: left out, the owner. */
function who(from: { id: string; name?: string; owner: boolean } | undefined): string {
  if (!from) return "Owner";
  return `${oneLine(from.name ?? from.id)}${from.owner ? " (owner)" : ""}`;
}

/** One event for a person: a heading line, then what it said. */
export function eventText({ n, event: e }: Numbered): string {
  const head = (what: string) => `#${n} · ${when(e.time)} · ${what}`;
  switch (e.kind) {
    case "message": {
      if (e.role === "user") {
        const lines = [head(`${who(e.from)}${e.channel !== undefined ? ` on ${oneLine(e.channel)}` : ""}`), safe(e.text)];
        if (e.skill) lines.push(`[skill ${oneLine(e.skill.name)}: ${e.skill.text.length} characters, sent with the message]`);
        for (const part of e.parts ?? []) lines.push(partName(part));
        return lines.join("\n");
      }
      const facts = [`${oneLine(e.model)} (${oneLine(e.provider)})`, seconds(e.latency_ms)];
      if (e.usage) facts.push(`${e.usage.in} in, ${e.usage.out} out, ${e.usage.cached} cached`);
      if (e.cost !== undefined) facts.push(`cost ${e.cost}`);
      if (e.stop !== "end_turn" && e.stop !== "tool_calls") facts.push(`stopped: ${e.stop}`);
      const lines = [head(`Agent · ${facts.join(" · ")}`)];
      if (e.thinking) {
        const size = (e.thinking.reasoning_content ?? e.thinking.reasoning ?? "").length;
        lines.push(`(thinking${size > 0 ? `: ${size} characters` : ""}, kept, not shown)`);
      }
      if (e.text.length > 0) lines.push(safe(e.text));
      for (const call of e.tool_calls ?? []) lines.push(`→ calls ${oneLine(call.name)} ${oneLine(shortened(call.arguments, ARGUMENTS_CHARS))} [${oneLine(call.id)}]`);
      return lines.join("\n");
    }
    case "tool_result": {
      const lines = [head(`${oneLine(e.tool)} ${e.error ? "failed" : "answered"} [${oneLine(e.call_id)}]${e.truncated ? " (cut when kept)" : ""}`)];
      lines.push(safe(shortened(e.text, ANSWER_CHARS, ANSWER_LINES)));
      return lines.join("\n");
    }
    case "command": {
      const canonical = commandLine(e);
      const typed = e.text?.trim();
      return [head(`${who(e.from)} · command`), typed && typed !== canonical ? `${oneLine(typed)} (as ${oneLine(canonical)})` : oneLine(canonical)].join("\n");
    }
    case "failure":
      return [head(`Turn failed: ${e.reason}${e.status !== undefined ? ` (status ${e.status})` : ""}`), safe(e.message)].join("\n");
    default: {
      const never: never = e;
      return String(never);
    }
  }
}

/** The first line: which conversation, how many events, from when to when. */
function heading(arg: string, read: ReadNamed): string {
  const at = (n: number | undefined) => (n === undefined ? undefined : readEvent(read.conv, n, false)?.time);
  const first = at(read.shown[0]);
  const last = at(read.shown.at(-1));
  const span = first !== undefined && last !== undefined ? `, ${when(first)} to ${when(last)}` : "";
  const count = `${read.shown.length} event${read.shown.length === 1 ? "" : "s"}`;
  const chat = read.conversations ? ` (a chat of ${read.conversations.length} conversations: ${read.conversations.map(oneLine).join(", ")}; name one as ${oneLine(arg)}~NAME)` : "";
  return `Conversation ${oneLine(arg)}: ${count}${span}${chat}`;
}

/** Prints the conversation, for a person or (json) in the portable session form. */
export async function printConversation(o: AgentOptions, thread: string, json: boolean): Promise<void> {
  const read = readNamed(agentRef(o), thread);
  if (read.left !== undefined) process.stderr.write(`lnk-link-harness: left out: ${read.left}\n`);
  const out = stdoutChunks();
  if (json) {
    await writeSessionJson(out, read);
    await out.write("\n");
  } else {
    await out.write(`${heading(thread, read)}\n`);
    for (const e of eventsAt(read.conv, read.shown)) await out.write(`\n${eventText(e)}\n`);
  }
  await out.end();
}
