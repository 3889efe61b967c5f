// OpenClaw's sessions in the portable session form (man lnk-link-harness-session(5)): the rows of
// its agent database's `transcript_events`, ordered by `seq`, each event's JSON (or its zstd-compressed
// copy) read as OpenClaw 2026.9 writes it. Its user and assistant messages, tool calls and their
// results, and thinking are carried, each with its time and the model that answered; every other
// event, field and part is named as left behind. The database is untrusted: nothing in it is followed
// as a path, each value is checked before it is used, and what can't be read is named, never thrown.
// sql.js and fzstd are loaded here alone, when `state import --from openclaw` asks.
import { z } from "zod";
import { AssistantMessage, Event, Part, Thread, ToolResult, UserMessage, type SessionForm, type Thinking, type ToolCall } from "../protocol/index.js";
import { withSuffix } from "./sessions.js";

/** The most of one event's JSON read, compressed or not: OpenClaw's own CHECK allows 4 MiB. */
export const OPENCLAW_EVENT_MAX = 4 * 1024 * 1024;
/** The most of all sessions' events taken: past it, the sessions after are left behind, named. */
export const OPENCLAW_SESSIONS_MAX = 256 * 1024 * 1024;
/** The most sessions of a database measured: past it (by id), the rest are left behind, counted. */
export const OPENCLAW_SESSIONS_COUNT_MAX = 100_000;
/** A tool's answer is kept up to 32 KiB, as a turn keeps one. */
const TOOL_TEXT_MAX = 32 * 1024;

export class OpenClawError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "OpenClawError";
  }
}

export interface ReadSessions {
  sessions: SessionForm[];
  /** What was not carried, each a line for a person. */
  left: string[];
}

const Row = z.object({
  session_id: z.string().min(1).max(1024),
  seq: z.number().int(),
  event_json: z.string().nullable(),
  event_zstd: z.instanceof(Uint8Array).nullable(),
  created_at: z.number().nullable(),
});
type Row = z.infer<typeof Row>;

/** A timestamp of OpenClaw's (milliseconds, or an ISO string) as an event's time, or undefined. */
function isoOf(value: unknown): string | undefined {
  const ms = typeof value === "number" ? value : typeof value === "string" ? Date.parse(value) : Number.NaN;
  // Years 1970 to 9999 only: a time the event schema and every reader take.
  if (!Number.isFinite(ms) || ms < 0 || ms > 253402300799999) return undefined;
  return new Date(ms).toISOString();
}

/** The line that heads a message for the model (as turn/sections.ts's messageHeader writes it). */
function header(time: string, owner: boolean): string {
  return `[${time.slice(0, 10)} ${time.slice(11, 16)} UTC · direct · ${owner ? "your owner" : "(unknown)"}]`;
}

/** A session's thread: `openclaw-` and its id in letters, digits, '.', '_' and '-'. */
export function threadOf(sessionId: string): string {
  const clean = sessionId
    .replace(/[^A-Za-z0-9._-]+/g, "-")
    .replace(/\.{2,}/g, ".")
    .slice(0, 100);
  const thread = `openclaw-${clean || "session"}`;
  return Thread.safeParse(thread).success ? thread : "openclaw-session";
}

/**
 * The most memory a zstd frame may ask for its window: OPENCLAW_EVENT_MAX and room to spare. The
 * decompressor allocates a frame's window whole, as its header says, and copies it for each block:
 * a blob of a hundred bytes may ask for two gigabytes.
 */
export const OPENCLAW_ZSTD_WINDOW_MAX = 4 * OPENCLAW_EVENT_MAX;

/**
 * Why a zstd blob's frames can't be unpacked within the bounds, read from their headers alone (RFC
 * 8878: each frame's window, then its blocks' headers to find the next frame); undefined when they
 * can. A frame header cut short is a fault too: the decompressor reads its missing bytes as 0 and
 * holds the window it asks for before it finds the end.
 */
export function zstdFault(data: Uint8Array): string | undefined {
  const cut = "its zstd copy is not a zstd frame that can be read";
  let at = 0;
  while (at + 4 <= data.length) {
    const magic = (data[at] as number) | ((data[at + 1] as number) << 8) | ((data[at + 2] as number) << 16) | ((data[at + 3] as number) << 24);
    if ((magic & 0xfffffff0) >>> 0 === 0x184d2a50) {
      // A skippable frame: its size follows.
      if (at + 8 > data.length) return undefined;
      const skipped = ((data[at + 4] as number) | ((data[at + 5] as number) << 8) | ((data[at + 6] as number) << 16) | ((data[at + 7] as number) << 24)) >>> 0;
      at += 8 + skipped;
      continue;
    }
    if (magic >>> 0 !== 0xfd2fb528) return undefined;
    if (at + 5 > data.length) return cut;
    const flags = data[at + 4] as number;
    const single = (flags >> 5) & 1;
    const dictBytes = [0, 1, 2, 4][flags & 3] as number;
    const sizeFlag = flags >> 6;
    const sizeBytes = sizeFlag === 0 ? single : 1 << sizeFlag;
    let p = at + 5;
    let window = 0;
    if (!single) {
      const w = data[p] as number | undefined;
      if (w === undefined) return cut;
      const base = 2 ** (10 + (w >> 3));
      window = base + (base / 8) * (w & 7);
      if (window > OPENCLAW_ZSTD_WINDOW_MAX) return `its zstd copy asks for a window of ${window} bytes, over ${OPENCLAW_ZSTD_WINDOW_MAX}`;
      p += 1;
    }
    p += dictBytes;
    if (p + sizeBytes > data.length) return cut;
    let content = 0;
    for (let i = sizeBytes - 1; i >= 0; i--) content = content * 256 + (data[p + i] as number);
    if (sizeFlag === 1) content += 256;
    p += sizeBytes;
    if (single) window = content;
    if (window > OPENCLAW_ZSTD_WINDOW_MAX) return `its zstd copy asks for a window of ${window} bytes, over ${OPENCLAW_ZSTD_WINDOW_MAX}`;
    if (sizeBytes > 0 && content > OPENCLAW_EVENT_MAX) return `its zstd copy unpacks to over ${OPENCLAW_EVENT_MAX} bytes`;
    // The blocks: a three-byte header each, then its bytes (one, for a block of one byte repeated).
    for (;;) {
      if (p + 3 > data.length) return cut;
      const header = (data[p] as number) | ((data[p + 1] as number) << 8) | ((data[p + 2] as number) << 16);
      const type = (header >> 1) & 3;
      p += 3 + (type === 1 ? 1 : header >>> 3);
      if (header & 1) break;
    }
    at = p + ((flags >> 2) & 1) * 4;
  }
  return undefined;
}

/** One event's JSON: its text, or its zstd copy decompressed (at most OPENCLAW_EVENT_MAX). */
async function eventText(row: Row): Promise<string> {
  if (row.event_json !== null) {
    if (row.event_json.length > OPENCLAW_EVENT_MAX) throw new OpenClawError(`over ${OPENCLAW_EVENT_MAX} characters`);
    return row.event_json;
  }
  if (row.event_zstd === null) throw new OpenClawError("neither event_json nor event_zstd");
  if (row.event_zstd.length > OPENCLAW_EVENT_MAX) throw new OpenClawError(`its zstd copy is over ${OPENCLAW_EVENT_MAX} bytes`);
  const fault = zstdFault(row.event_zstd);
  if (fault !== undefined) throw new OpenClawError(fault);
  const { Decompress } = await import("fzstd");
  const chunks: Uint8Array[] = [];
  let size = 0;
  let ended = false;
  try {
    // Streamed, so a small blob that would unpack to gigabytes stops at the limit.
    const stream = new Decompress((chunk, final) => {
      size += chunk.length;
      if (size > OPENCLAW_EVENT_MAX) throw new OpenClawError(`its zstd copy unpacks to over ${OPENCLAW_EVENT_MAX} bytes`);
      chunks.push(chunk);
      if (final) ended = true;
    });
    stream.push(row.event_zstd, true);
  } catch (e) {
    if (e instanceof OpenClawError) throw e;
    throw new OpenClawError("its zstd copy is not a zstd frame that can be read");
  }
  if (!ended && size === 0) throw new OpenClawError("its zstd copy is not a zstd frame that can be read");
  const text = Buffer.concat(chunks).toString("utf8");
  if (text.includes("\uFFFD")) throw new OpenClawError("its zstd copy is not UTF-8 text");
  return text;
}

/** Why OpenClaw writes an event of a type no message is made of, and Link Harness keeps nothing of it. */
const EVENT_WHY: Record<string, string> = {
  thinking_level_change: "OpenClaw's thinking level, which Link Harness takes from the agent's spec",
  model_change: "a change of OpenClaw's model; each answer keeps the model that gave it",
  custom: "OpenClaw's own records",
  custom_message: "a message of OpenClaw's own making, not said by the owner or the model",
  compaction: "OpenClaw's summary of earlier messages; the messages themselves are carried",
  branch_summary: "OpenClaw's summary of a branch left; its messages are carried",
  label: "OpenClaw's label of an entry",
  session_info: "OpenClaw's name for the session",
};

/** The fields of a message carried into an event: any other is named as left behind. */
const CARRIED = new Set(["role", "content", "timestamp", "model", "provider", "responseId", "stopReason", "errorMessage", "toolCallId", "toolName", "isError"]);
const USAGE_CARRIED = new Set(["input", "output", "cacheRead", "cacheWrite"]);

const STOP: Record<string, AssistantMessage["stop"]> = { stop: "end_turn", toolUse: "tool_calls", length: "max_tokens", aborted: "cancelled", error: "end_turn" };

const Count = z.number().int().nonnegative();

/**
 * The most different things one Leaving names: each row's fault is named by its place, and a type,
 * a role or a field's name may be anything, so a session of millions of rows could name millions
 * (a transcript of lines of `{}` ran the heap out). Past it they are counted.
 */
export const OPENCLAW_LEFT_NAMED = 1000;

/** What one session's conversion leaves behind: counted by what it is, and said once. */
class Leaving {
  private readonly counts = new Map<string, number>();
  /** Those past OPENCLAW_LEFT_NAMED, not named. */
  private more = 0;
  add(what: string): void {
    const n = this.counts.get(what);
    if (n !== undefined) this.counts.set(what, n + 1);
    else if (this.counts.size < OPENCLAW_LEFT_NAMED) this.counts.set(what, 1);
    else this.more++;
  }
  lines(prefix: string): string[] {
    const lines = [...this.counts].map(([what, n]) => `${prefix}: ${what}${n > 1 ? ` (${n} times)` : ""}`);
    if (this.more > 0) lines.push(`${prefix}: ${this.more} more thing${this.more === 1 ? "" : "s"} not carried, past the first ${OPENCLAW_LEFT_NAMED} named`);
    return lines;
  }
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

/** A user message's text and parts: its text parts joined, its images as data: URLs. */
function userContent(content: unknown, leave: Leaving): { text: string; parts: z.infer<typeof Part>[] } | undefined {
  if (typeof content === "string") return { text: content, parts: [] };
  if (!Array.isArray(content)) return undefined;
  const texts: string[] = [];
  const parts: z.infer<typeof Part>[] = [];
  for (const part of content) {
    if (isObj(part) && part.type === "text" && typeof part.text === "string") texts.push(part.text);
    else if (
      isObj(part) &&
      part.type === "image" &&
      typeof part.mimeType === "string" &&
      /^image\/(png|jpeg|gif|webp)$/.test(part.mimeType) &&
      typeof part.data === "string" &&
      /^[A-Za-z0-9+/]*={0,2}$/.test(part.data)
    ) {
      parts.push({ type: "image_url", image_url: { url: `data:${part.mimeType};base64,${part.data}` } });
    } else leave.add(`a part of a user's message of type ${describeType(part)}: not one this import carries`);
  }
  return { text: texts.join("\n"), parts };
}

function describeType(part: unknown): string {
  return isObj(part) && typeof part.type === "string" ? JSON.stringify(part.type.slice(0, 40)) : "(none)";
}

/** The fields of a message not carried, named once each. */
function leaveFields(message: Obj, leave: Leaving): void {
  for (const key of Object.keys(message)) {
    if (key === "usage" && isObj(message.usage)) {
      for (const k of Object.keys(message.usage)) if (!USAGE_CARRIED.has(k)) leave.add(`their messages' usage.${k}: OpenClaw's own count or price, not carried`);
    } else if (!CARRIED.has(key)) leave.add(`their messages' field ${JSON.stringify(key.slice(0, 40))}: OpenClaw's own, not carried`);
  }
}

/** One OpenClaw message as events (an answer that failed may add a failure), or undefined with why. */
function convert(message: Obj, time: string, leave: Leaving): Event[] | string {
  leaveFields(message, leave);
  if (message.role === "user") {
    const content = userContent(message.content, leave);
    if (!content) return "a user's message whose content is neither text nor a list of parts";
    const owner = !(isObj(message.__openclaw) && message.__openclaw.senderIsOwner === false);
    const event: UserMessage = {
      v: 1,
      time,
      kind: "message",
      role: "user",
      text: content.text,
      header: header(time, owner),
      ...(content.parts.length ? { parts: content.parts } : {}),
      ...(owner ? {} : { from: { id: "unknown", owner: false } }),
    };
    return [event];
  }
  if (message.role === "assistant") {
    const content = typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content;
    if (!Array.isArray(content)) return "an answer whose content is not a list of parts";
    const texts: string[] = [];
    const thinking: string[] = [];
    const calls: ToolCall[] = [];
    for (const part of content as unknown[]) {
      if (isObj(part) && part.type === "text" && typeof part.text === "string") texts.push(part.text);
      else if (isObj(part) && part.type === "thinking" && typeof part.thinking === "string") {
        thinking.push(part.thinking);
        if (part.thinkingSignature !== undefined) leave.add("a thinking's signature: its provider's alone, not carried");
        if (part.redacted === true) leave.add("a thinking its provider redacted: carried as OpenClaw kept it");
      } else if (isObj(part) && part.type === "toolCall" && typeof part.id === "string" && typeof part.name === "string") {
        const args = typeof part.arguments === "string" ? part.arguments : JSON.stringify(part.arguments ?? {});
        calls.push({ id: part.id, name: part.name, arguments: args });
      } else leave.add(`a part of an answer of type ${describeType(part)}: not one this import carries`);
    }
    // OpenClaw's input leaves out what was read from the cache and written to it; a turn's `in` is all the prompt.
    const usage = isObj(message.usage)
      ? {
          in: Count.safeParse(
            [message.usage.input, message.usage.cacheRead ?? 0, message.usage.cacheWrite ?? 0].reduce<unknown>((a, b) => (typeof a === "number" && typeof b === "number" ? a + b : Number.NaN), 0),
          ),
          out: Count.safeParse(message.usage.output),
          cached: Count.safeParse(message.usage.cacheRead ?? 0),
        }
      : undefined;
    const stopReason = typeof message.stopReason === "string" ? message.stopReason : "stop";
    const thought: Thinking | undefined = thinking.length ? { reasoning_content: thinking.join("\n") } : undefined;
    const answer: z.input<typeof AssistantMessage> = {
      v: 1,
      time,
      kind: "message",
      role: "assistant",
      text: texts.join("\n"),
      model: typeof message.model === "string" && message.model ? message.model : "unknown",
      provider: typeof message.provider === "string" && message.provider ? message.provider : "openclaw",
      ...(typeof message.responseId === "string" ? { response_id: message.responseId } : {}),
      ...(usage?.in.success && usage.out.success && usage.cached.success ? { usage: { in: usage.in.data, out: usage.out.data, cached: usage.cached.data } } : {}),
      // OpenClaw keeps no latency: none is made up.
      latency_ms: 0,
      ...(thought ? { thinking: thought } : {}),
      ...(calls.length ? { tool_calls: calls } : {}),
      stop: calls.length && stopReason === "toolUse" ? "tool_calls" : (STOP[stopReason] ?? "end_turn"),
    };
    if (STOP[stopReason] === undefined) leave.add(`an answer's stop reason ${JSON.stringify(stopReason.slice(0, 40))}: carried as end_turn`);
    const events: Event[] = [];
    const failed = stopReason === "error";
    if (!failed || answer.text || calls.length) events.push(AssistantMessage.parse(answer));
    if (failed) {
      const why = typeof message.errorMessage === "string" && message.errorMessage ? message.errorMessage.slice(0, 4096) : "the model's answer failed";
      events.push({ v: 1, time, kind: "failure", reason: "model_error", message: why });
    }
    return events;
  }
  if (message.role === "toolResult") {
    if (typeof message.toolCallId !== "string" || typeof message.toolName !== "string") return "a tool's result without its call's id or the tool's name";
    const texts: string[] = [];
    for (const part of Array.isArray(message.content) ? (message.content as unknown[]) : [message.content]) {
      if (typeof part === "string") texts.push(part);
      else if (isObj(part) && part.type === "text" && typeof part.text === "string") texts.push(part.text);
      else leave.add(`a part of a tool's result of type ${describeType(part)}: a tool's answer is kept as text`);
    }
    const text = texts.join("\n");
    const cut = Buffer.byteLength(text) > TOOL_TEXT_MAX;
    if (cut) leave.add(`a tool's result past ${TOOL_TEXT_MAX} bytes: cut there, as a turn keeps one`);
    const result: ToolResult = {
      v: 1,
      time,
      kind: "tool_result",
      call_id: message.toolCallId,
      tool: message.toolName,
      text: cut ? Buffer.from(text).subarray(0, TOOL_TEXT_MAX).toString("utf8").replace(/\uFFFD$/, "") : text,
      error: message.isError === true,
      ...(cut ? { truncated: true } : {}),
    };
    return [ToolResult.parse(result)];
  }
  const role = typeof message.role === "string" ? JSON.stringify(message.role.slice(0, 40)) : "(none)";
  return `a message of role ${role}: OpenClaw's own, which Link Harness has no event for`;
}

/**
 * One session's rows, fed in order of seq, as a session; what it leaves behind named. Its events'
 * size is counted as they are made (as the session form holds them, in characters of JSON), and
 * `keep: false` counts without keeping them: a database's sessions are measured first, then only
 * those within the import's limit are made again and kept.
 */
class SessionConverter {
  readonly thread: string;
  readonly events: Event[] = [];
  /** The characters of JSON its events take in the session form. */
  chars = 0;
  private readonly leave = new Leaving();
  private lastId: unknown = null;
  private branched = false;

  constructor(
    thread: string,
    private readonly parts: Leaving,
    private readonly at: (row: Row) => string,
    private readonly keep = true,
  ) {
    this.thread = thread;
  }

  async row(row: Row): Promise<void> {
    const { leave, at } = this;
    let entry: unknown;
    try {
      entry = JSON.parse(await eventText(row));
    } catch (e) {
      leave.add(`${at(row)}: ${e instanceof OpenClawError ? e.message : "its JSON can't be read"}`);
      return;
    }
    if (!isObj(entry) || typeof entry.type !== "string") {
      leave.add(`${at(row)}: not an object with a type`);
      return;
    }
    if (entry.type !== "session") {
      if (entry.parentId !== undefined && entry.parentId !== this.lastId) this.branched = true;
      this.lastId = entry.id;
    }
    if (entry.type === "session") {
      const cwd = typeof entry.cwd === "string" ? `, ${JSON.stringify(entry.cwd.slice(0, 200))}` : "";
      leave.add(`its header's working folder${cwd}: a folder of the machine OpenClaw ran on`);
      return;
    }
    if (entry.type !== "message") {
      const type = entry.type.slice(0, 40);
      const why = EVENT_WHY[type] ?? "an event of a type this import does not know";
      const sub = type === "custom" && typeof entry.customType === "string" ? ` ${JSON.stringify(entry.customType.slice(0, 40))}` : "";
      leave.add(`its ${JSON.stringify(type)}${sub} event: ${why}`);
      return;
    }
    if (!isObj(entry.message)) {
      leave.add(`${at(row)}: a message event without its message`);
      return;
    }
    const time = isoOf(entry.message.timestamp) ?? isoOf(entry.timestamp) ?? isoOf(row.created_at);
    if (time === undefined) {
      leave.add(`${at(row)}: a message without a time`);
      return;
    }
    let made: Event[] | string;
    try {
      made = convert(entry.message, time, this.parts);
    } catch {
      made = "a message not of the shape OpenClaw writes";
    }
    if (typeof made === "string") {
      leave.add(`${at(row)}: ${made}`);
      return;
    }
    for (const e of made) {
      const ok = Event.safeParse(e);
      if (!ok.success) {
        leave.add(`${at(row)}: a message not of the shape OpenClaw writes`);
        continue;
      }
      // Each one at most a few of OPENCLAW_EVENT_MAX: its JSON and the comma after it.
      this.chars += JSON.stringify(ok.data).length + 1;
      if (this.keep) this.events.push(ok.data);
    }
  }

  /** What it left behind, said once each. */
  left(): string[] {
    const left = this.leave.lines(`session ${this.thread}`);
    if (this.branched) left.push(`session ${this.thread}: its branches (OpenClaw's rewinds) are carried one after another, in the order they were written`);
    return left;
  }
}

interface Database {
  exec(sql: string): { columns: string[]; values: unknown[][] }[];
  prepare(sql: string): { step(): boolean; getAsObject(): Record<string, unknown>; free(): boolean };
  close(): void;
}

/** Opens a database's bytes with sql.js; one that is not SQLite is a clear error. */
export async function openDatabase(bytes: Uint8Array, name: string): Promise<Database> {
  const initSqlJs = (await import("sql.js")).default;
  const SQL = await initSqlJs();
  const db = new SQL.Database(bytes) as unknown as Database;
  try {
    db.exec("SELECT name FROM sqlite_master LIMIT 1");
  } catch (e) {
    db.close();
    throw new OpenClawError(`${name} is not a SQLite database that can be read: ${(e as Error).message}`);
  }
  return db;
}

/** The tables of the database that hold rows, and how many (transcript_events aside). */
function otherTables(db: Database): [string, number][] {
  const names = (db.exec("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")[0]?.values ?? []).map((r) => String(r[0]));
  const out: [string, number][] = [];
  for (const name of names) {
    if (name === "transcript_events" || name.startsWith("sqlite_")) continue;
    try {
      const n = Number(db.exec(`SELECT count(*) FROM "${name.replace(/"/g, '""')}"`)[0]?.values[0]?.[0] ?? 0);
      if (n > 0) out.push([name, n]);
    } catch {
      // A virtual table whose module sql.js lacks: its rows are named as unknown.
      out.push([name, Number.NaN]);
    }
  }
  return out;
}

/**
 * Sessions converted one after another, from the database and from JSONL transcripts: their threads
 * kept apart, their size bounded, and what their messages leave of fields and parts said once.
 */
export class SessionsRead implements ReadSessions {
  readonly sessions: SessionForm[] = [];
  readonly left: string[] = [];
  private size = 0;
  /** Each session's thread, by its id. */
  private readonly ids = new Map<string, string>();
  /** The threads given, and for each name threadOf made, the first of its `-<k>` names not yet looked at. */
  private readonly threads = new Set<string>();
  private readonly next = new Map<string, number>();
  readonly parts = new Leaving();

  /** Whether the session of this very id was read already: its transcript and its rows are one session. */
  has(sessionId: string): boolean {
    return this.ids.has(sessionId);
  }

  /**
   * The thread a session is carried under: threadOf its id, or, where another session's id made
   * that name already (ids `a b` and `a-b`), the first of that name's `-<k>` that no session has.
   * Another session is no reason to leave one behind: two sessions of one thread are written under
   * names of their own anyway (writeSessions), and a second import finds each again by its events
   * (importedAs). Named apart here, what is said of each (what came, what was left) is told apart.
   */
  threadOf(sessionId: string): string {
    const given = this.ids.get(sessionId);
    if (given !== undefined) return given;
    const made = threadOf(sessionId);
    let thread = made;
    // The names looked at before are not looked at again: thousands of ids may make one name.
    for (let k = this.next.get(made) ?? 2; this.threads.has(thread); k++) {
      thread = withSuffix(made, k);
      this.next.set(made, k + 1);
    }
    this.ids.set(sessionId, thread);
    this.threads.add(thread);
    return thread;
  }

  /** Takes a session of `chars` characters of events, or says why not: one past the import's limit. Its thread is given either way. */
  admit(sessionId: string, chars: number): boolean {
    const thread = this.threadOf(sessionId);
    if (this.size + chars > OPENCLAW_SESSIONS_MAX) {
      this.left.push(`session ${thread}: past the import's limit of ${OPENCLAW_SESSIONS_MAX} bytes of sessions`);
      return false;
    }
    this.size += chars;
    return true;
  }

  /** One session's rows, in order of seq. */
  async add(sessionId: string, rows: Iterable<Row>, at: (row: Row) => string = (row) => `its event seq ${row.seq}`): Promise<void> {
    const made = new SessionConverter(this.threadOf(sessionId), this.parts, at);
    for (const row of rows) await made.row(row);
    this.left.push(...made.left());
    if (this.admit(sessionId, made.chars)) this.sessions.push({ thread: made.thread, events: made.events });
  }

  /** What every session's messages left of their fields and parts, once all are read. */
  done(): void {
    this.left.push(...this.parts.lines("sessions"));
  }
}

/** Every row of transcript_events in order of session and seq, one at a time; `bad` counts rows not of OpenClaw's columns' types. */
async function eachRow(db: Database, each: (row: Row) => Promise<void>): Promise<number> {
  const st = db.prepare("SELECT session_id, seq, event_json, event_zstd, created_at FROM transcript_events ORDER BY session_id, seq");
  let bad = 0;
  try {
    while (st.step()) {
      const row = Row.safeParse(st.getAsObject());
      if (row.success) await each(row.data);
      else bad++;
    }
  } finally {
    st.free();
  }
  return bad;
}

/**
 * Reads the sessions of an OpenClaw agent database (its bytes; `name` says where it is, for a person)
 * into `into`, each ordered by seq, the sessions in the order they began. The database's other tables
 * are named as left behind. A file that is not SQLite, or a database whose transcript_events can't be
 * read, is an OpenClawError. The rows are read one at a time, twice: first to measure each session,
 * then to make those within the import's limit (taken in the order they began): what is held at
 * once is those sessions and one row, whatever the database's size.
 */
export async function readDatabase(bytes: Uint8Array, name: string, into: SessionsRead, sessionsMax = OPENCLAW_SESSIONS_COUNT_MAX): Promise<void> {
  const db = await openDatabase(bytes, name);
  try {
    let tables: [string, number][];
    const measured = new Map<string, { chars: number; began: number }>();
    try {
      tables = otherTables(db);
      // A view may compute rows without end (a recursive one of a few bytes): only a table is read.
      const kind = db.exec("SELECT type FROM sqlite_master WHERE name = 'transcript_events'")[0]?.values[0]?.[0];
      if (kind !== "table") throw new Error(kind === undefined ? "there is no such table" : `it is a ${String(kind)}, not a table`);
      let made: SessionConverter | undefined;
      let id: string | undefined;
      const measure = (): void => {
        const m = id === undefined ? undefined : measured.get(id);
        if (made && m) m.chars = made.chars;
      };
      let past = 0;
      const bad = await eachRow(db, async (row) => {
        if (row.session_id !== id) {
          measure();
          id = row.session_id;
          if (measured.size >= sessionsMax) {
            // Each a few entries of a map: a database of millions of one-row sessions must not fill the heap.
            past++;
            made = undefined;
            return;
          }
          // Measured only: what it leaves, said under its thread, is said when it is made again.
          made = new SessionConverter("", new Leaving(), () => "", false);
          measured.set(id, { chars: 0, began: Infinity });
        }
        if (!made) return;
        await made.row(row);
        const m = measured.get(row.session_id) as { chars: number; began: number };
        m.began = Math.min(m.began, row.created_at ?? Infinity);
      });
      measure();
      if (past > 0) into.left.push(`${name}: ${past} session${past === 1 ? "" : "s"} past the import's ${sessionsMax} (the first by id are read)`);
      if (bad > 0) into.left.push(`${name}: ${bad} row${bad === 1 ? "" : "s"} of transcript_events not of OpenClaw's columns' types`);
    } catch (e) {
      throw new OpenClawError(`${name}: its transcript_events can't be read: ${(e as Error).message}`);
    }
    // The sessions in the order they began, then by id; those within the limit made again, and kept.
    const order = [...measured].sort(([a, x], [b, y]) => (x.began !== y.began ? (x.began < y.began ? -1 : 1) : a < b ? -1 : a > b ? 1 : 0));
    const taken = new Set(order.filter(([id, m]) => into.admit(id, m.chars)).map(([id]) => id));
    const made = new Map<string, SessionConverter>();
    try {
      await eachRow(db, async (row) => {
        if (!taken.has(row.session_id)) return;
        let session = made.get(row.session_id);
        if (!session) made.set(row.session_id, (session = new SessionConverter(into.threadOf(row.session_id), into.parts, (r) => `its event seq ${r.seq}`)));
        await session.row(row);
      });
    } catch (e) {
      throw new OpenClawError(`${name}: its transcript_events can't be read: ${(e as Error).message}`);
    }
    for (const [id] of order) {
      const session = made.get(id);
      if (!session) continue;
      into.left.push(...session.left());
      into.sessions.push({ thread: session.thread, events: session.events });
    }
    if (tables.length > 0) {
      const named = tables.map(([table, n]) => `${table} (${Number.isNaN(n) ? "rows not counted" : `${n} row${n === 1 ? "" : "s"}`})`);
      into.left.push(`${name}: its other tables, OpenClaw's own records, not carried: ${named.join(", ")}`);
    }
  } finally {
    db.close();
  }
}

/** One JSONL transcript of OpenClaw's before its database (a line an event, in order) into `into`. */
export async function readTranscript(text: string, sessionId: string, into: SessionsRead): Promise<void> {
  await into.add(sessionId, transcriptRows(text, sessionId), (row) => `its line ${row.seq}`);
}

/**
 * A transcript's lines that hold anything, one row at a time, each row's seq its line's number from
 * 1: a transcript within its limit may hold tens of millions of lines, and a row made of each at once
 * ran the heap out.
 */
function* transcriptRows(text: string, sessionId: string): Generator<Row> {
  let seq = 0;
  for (let at = 0; at <= text.length; ) {
    const end = text.indexOf("\n", at);
    const line = text.slice(at, end === -1 ? text.length : end);
    seq++;
    at = end === -1 ? text.length + 1 : end + 1;
    if (line.trim() !== "") yield { session_id: sessionId, seq, event_json: line, event_zstd: null, created_at: null };
  }
}
