// The process's tools: each tool's list of calls, memory's kept session, and each turn's own sessions.
// Spec: "Does a turn hold anything of its tools? Only memory's session, kept between turns."
import { TIMEOUT_DEFAULTS } from "../../protocol/index.js";
import { envSecrets, redactor, sourceSecrets, type Redactor } from "../../turn/redact.js";
import type { OfferedCall, OpenOptions, ToolAnswer, ToolBox, ToolHost, ToolMedia, ToolServer } from "../../turn/tools.js";
import { keepRecent, useRecent } from "../../turn/recent.js";
import { MEMORY_TOOL } from "../../turn/tools.js";
import { log } from "../log.js";
import { offerCalls, unfitWithSecrets, type ListedTool } from "./offer.js";
import { type ListedCall, SessionLost, ToolSession, within } from "./session.js";

export interface McpToolHostOptions {
  /** Memory's session ends once unused this long (spec: 10 minutes). */
  memoryIdleMs?: number;
  /** …or this long after it started (spec: an hour). */
  memoryMaxAgeMs?: number;
  /** How long opening a turn waits for the tools not listed yet. */
  listTimeoutMs?: number;
  /** How long a session may take to start. */
  startTimeoutMs?: number;
  /** How long a call may go without an answer or a progress report; a turn's settings (timeouts.tool_idle) win. */
  callTimeoutMs?: number;
  /** How long a call may take, progress or not; a turn's settings (timeouts.tool_call) win. */
  callTotalMs?: number;
  /**
   * The most tools' lists kept (one a tool's source: an ACP client's own servers add theirs); past it
   * the one used least lately is let go, and listed again when next needed.
   */
  listsKept?: number;
}

/** The most calls left out the log remembers having said (then it says them again). */
const SAID_MAX = 4_096;

const DEFAULTS: Required<McpToolHostOptions> = {
  memoryIdleMs: 10 * 60_000,
  memoryMaxAgeMs: 60 * 60_000,
  listTimeoutMs: 10_000,
  startTimeoutMs: 30_000,
  callTimeoutMs: TIMEOUT_DEFAULTS.tool_idle * 1000,
  callTotalMs: TIMEOUT_DEFAULTS.tool_call * 1000,
  listsKept: 256,
};

/** The secrets a tool's log lines and errors are cleared of: the agent's environment's and its source's own. */
function secretsOf(env: NodeJS.ProcessEnv, servers: readonly ToolServer[], extra: readonly string[] = []): Redactor {
  return redactor(envSecrets(env), ...servers.map((s) => sourceSecrets(s.source)), [...extra]);
}

/** A stdio tool starts in the workspace, unless its source names a folder of its own. */
function inWorkspace(server: ToolServer, cwd: string | undefined): ToolServer {
  if (cwd === undefined || server.source.type !== "stdio" || server.source.cwd !== undefined) return server;
  return { ...server, source: { ...server.source, cwd } };
}

/** A session being started or up; `session` is set once it is. */
class Held {
  session: ToolSession | undefined;
  readonly start: Promise<ToolSession>;
  /** The tool's calls as this session listed them. */
  readonly listed: Promise<ListedCall[]>;
  constructor(start: Promise<ToolSession>, list: (s: ToolSession) => Promise<ListedCall[]>) {
    this.start = start;
    this.listed = start.then(list);
    start.then((s) => (this.session = s), () => {});
    this.listed.catch(() => {});
  }
  get lost(): boolean {
    return this.session?.lost === true;
  }
  close(): Promise<void> {
    return this.start.then((s) => s.close(), () => {});
  }
}

/** Memory's session, kept across turns and conversations. */
class Kept extends Held {
  active = 0;
  retired = false;
  idle: NodeJS.Timeout | undefined;
  age: NodeJS.Timeout | undefined;
}

interface Entry extends OfferedCall {
  server: ToolServer;
  key: string;
}

/** The MCP implementation of the turn's ToolHost: one a process. */
export class McpToolHost implements ToolHost {
  private readonly opts: Required<McpToolHostOptions>;
  /** The environment of the agent whose tools these are: its secrets are kept out of every log line and error. */
  private readonly env: NodeJS.ProcessEnv;
  /** Each tool's calls, by its source, the one used most lately last: derived, asked again whenever a session starts. */
  private readonly lists = new Map<string, ListedCall[]>();
  private readonly listing = new Map<string, Promise<void>>();
  private readonly kept = new Map<string, Kept>();
  /** Kept sessions retired while a call still ran on them: ended when it is done. */
  private readonly retiring = new Set<Kept>();
  private readonly boxes = new Set<TurnTools>();
  /** Work that must end before the host has: listings, sessions being ended. */
  private readonly background = new Set<Promise<unknown>>();
  private readonly shutdown = new AbortController();
  /** The calls left out already said in the log (each once, not at every turn). */
  private readonly saidLeftOut = new Set<string>();
  /** The secrets of the agent's settings as its last turn gave them: kept out of what its tools' sessions log too. */
  private known: readonly string[] = [];

  constructor(opts: McpToolHostOptions = {}, env: NodeJS.ProcessEnv = process.env) {
    this.opts = { ...DEFAULTS, ...opts };
    this.env = env;
  }

  get closed(): boolean {
    return this.shutdown.signal.aborted;
  }

  async open(servers: readonly ToolServer[], opts: OpenOptions = {}): Promise<ToolBox> {
    if (this.closed) throw new Error("the tool host is closed");
    if (opts.secrets !== undefined) this.known = opts.secrets;
    const tools = uniqueSorted(servers).map((s) => inWorkspace(s, opts.cwd));
    // Those kept are the most lately used now: a list this turn takes in their place lets go of another's.
    const unlisted = tools.filter((t) => this.listOf(sourceKey(t)) === undefined);
    // Spec: "a process that hasn't listed them yet lists all of them at once when its first turn starts".
    await Promise.all(unlisted.map((t) => this.waitForList(t, opts.signal)));
    if (this.closed) throw new Error("the tool host is closed");
    const bounds = {
      timeoutMs: opts.timeouts?.tool_idle !== undefined ? opts.timeouts.tool_idle * 1000 : this.opts.callTimeoutMs,
      totalMs: opts.timeouts?.tool_call !== undefined ? opts.timeouts.tool_call * 1000 : this.opts.callTotalMs,
    };
    const secrets = secretsOf(this.env, tools, opts.secrets);
    const box = new TurnTools(this, this.offer(tools, opts.allowed, secrets), bounds, secrets);
    this.boxes.add(box);
    return box;
  }

  async close(): Promise<void> {
    this.shutdown.abort();
    await Promise.all([...this.boxes].map((b) => b.close()));
    // Ended now, even with a call still running on them: nothing outlives the host.
    for (const kept of [...this.kept.values(), ...this.retiring]) {
      this.retire(kept);
      this.retiring.delete(kept);
      this.track(kept.close());
    }
    while (this.background.size > 0) await Promise.allSettled([...this.background]);
  }

  // --- lists -------------------------------------------------------------------------------------

  private async waitForList(server: ToolServer, signal: AbortSignal | undefined): Promise<void> {
    const key = sourceKey(server);
    let job = this.listing.get(key);
    if (job === undefined) {
      job = this.firstList(server, key);
      this.listing.set(key, job);
      const done = (): void => void this.listing.delete(key);
      this.track(job.then(done, done));
    }
    try {
      await within(abortable(job, signal), this.opts.listTimeoutMs);
    } catch (e) {
      // Spec: "A tool that was never listed and doesn't answer is left out of that turn only."
      log.warn("tool left out of this turn", { tool: server.name, why: secretsOf(this.env, [server], this.known).redact(message(e)) });
    }
  }

  private async firstList(server: ToolServer, key: string): Promise<void> {
    if (server.name === MEMORY_TOOL) {
      // Memory's listing session is the kept one: starting it again costs its model and index.
      const kept = this.keptFor(server);
      await kept.listed.catch(async () => {
        const session = await kept.start;
        this.keepList(key, await session.list(this.opts.listTimeoutMs, this.shutdown.signal));
      });
      return;
    }
    const session = await ToolSession.start(server, this.opts.startTimeoutMs, secretsOf(this.env, [server], this.known), this.shutdown.signal);
    try {
      this.keepList(key, await session.list(this.opts.listTimeoutMs, this.shutdown.signal));
    } finally {
      this.track(session.close());
    }
  }

  /** Keeps a tool's list, the newest kept; past `listsKept`, the one used least lately is let go. */
  private keepList(key: string, calls: ListedCall[]): void {
    keepRecent(this.lists, key, calls, this.opts.listsKept);
  }

  /** A tool's list kept, now the one used most lately; undefined when none is. */
  private listOf(key: string): ListedCall[] | undefined {
    return useRecent(this.lists, key);
  }

  private offer(tools: readonly ToolServer[], allowed: readonly string[] | undefined, secrets: Redactor): Entry[] {
    const listed: ListedTool<{ server: ToolServer; key: string }>[] = [];
    for (const server of tools) {
      const key = sourceKey(server);
      const calls = this.listOf(key);
      if (calls !== undefined) listed.push({ name: server.name, calls: unfitWithSecrets(calls, secrets), with: { server, key } });
    }
    const { offered, leftOut } = offerCalls(listed, allowed, (tool) => tool === MEMORY_TOOL);
    for (const l of leftOut) {
      const said = JSON.stringify([l.tool, l.call, l.why]);
      if (this.saidLeftOut.has(said)) continue;
      if (this.saidLeftOut.size >= SAID_MAX) this.saidLeftOut.clear();
      this.saidLeftOut.add(said);
      log.warn("a tool's call is not offered", { tool: l.tool, call: secrets.redact(l.call).slice(0, 200), why: l.why });
    }
    return offered.map(({ with: w, ...call }) => ({ ...call, server: w.server, key: w.key }));
  }

  // --- sessions ----------------------------------------------------------------------------------

  /** Starts a session and asks its list again (spec: "asked again whenever a session starts"). */
  startSession<H extends Held>(server: ToolServer, signal: AbortSignal, Kind: new (...a: ConstructorParameters<typeof Held>) => H): H {
    const key = sourceKey(server);
    return new Kind(ToolSession.start(server, this.opts.startTimeoutMs, secretsOf(this.env, [server], this.known), signal), async (session) => {
      const calls = await session.list(this.opts.listTimeoutMs, signal);
      this.keepList(key, calls);
      return calls;
    });
  }

  /** Memory's kept session, started when there is none or it was lost. */
  keptFor(server: ToolServer): Kept {
    const key = sourceKey(server);
    const current = this.kept.get(key);
    if (current !== undefined && !current.lost) return current;
    if (current !== undefined) this.retire(current);
    const kept = this.startSession(server, this.shutdown.signal, Kept);
    this.kept.set(key, kept);
    kept.start.then(
      () => {
        if (kept.retired) return;
        kept.age = setTimeout(() => this.retire(kept), this.opts.memoryMaxAgeMs).unref();
        this.release(kept, 0);
      },
      () => {
        // Not kept: the next call tries again.
        if (this.kept.get(key) === kept) this.kept.delete(key);
      },
    );
    return kept;
  }

  /** A call on memory's session ended (or none began): once it is unused, its idle time starts. */
  release(kept: Kept, calls = 1): void {
    kept.active -= calls;
    if (kept.active > 0) return;
    if (kept.retired) {
      if (this.retiring.delete(kept)) this.track(kept.close());
      return;
    }
    clearTimeout(kept.idle);
    kept.idle = setTimeout(() => this.retire(kept), this.opts.memoryIdleMs).unref();
  }

  /** Ends a kept session once its calls are done; the next call starts a new one. */
  retire(kept: Kept): void {
    if (kept.retired) return;
    kept.retired = true;
    clearTimeout(kept.idle);
    clearTimeout(kept.age);
    for (const [key, k] of this.kept) if (k === kept) this.kept.delete(key);
    if (kept.active === 0) this.track(kept.close());
    else this.retiring.add(kept);
  }

  track(p: Promise<unknown>): void {
    const job = p.catch(() => {});
    this.background.add(job);
    void job.then(() => this.background.delete(job));
  }

  forget(box: TurnTools): void {
    this.boxes.delete(box);
  }
}

/** One turn's tools: its own sessions, ended with it; memory's goes through the host. */
class TurnTools implements ToolBox {
  readonly offered: readonly OfferedCall[];
  private readonly entries = new Map<string, Entry>();
  private readonly sessions = new Map<string, Held>();
  /** Tools that failed to start this turn: answered as unavailable until the next turn. */
  private readonly unavailable = new Map<string, string>();
  private readonly ended = new AbortController();
  private readonly ending = new Set<Promise<void>>();

  constructor(
    private readonly host: McpToolHost,
    entries: readonly Entry[],
    private readonly bounds: { timeoutMs: number; totalMs: number },
    private readonly secrets: Redactor,
  ) {
    this.offered = Object.freeze(
      entries.map(({ name, tool, call, description, parameters }) => ({ name, tool, call, description, parameters })),
    );
    for (const e of entries) this.entries.set(e.name, e);
  }

  /** Every answer, a tool's own or one about it, comes back without a secret the turn knows of. */
  async call(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<ToolAnswer> {
    const answer = await this.answer(name, args, signal);
    const media = answer.media?.filter((m) => this.clean(m));
    return { ...answer, text: this.secrets.redact(answer.text), ...(media !== undefined ? { media } : {}) };
  }

  /** Whether what a tool showed is free of every secret the turn knows of (its text fields as they are): one that is not is left out. */
  private clean(m: ToolMedia): boolean {
    const fields = m.type === "image" ? [m.mimeType] : [m.uri, m.name, m.mimeType ?? ""];
    return fields.every((f) => this.secrets.redact(f) === f);
  }

  private async answer(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<ToolAnswer> {
    try {
      const entry = this.entries.get(name);
      // Spec: "a call to a tool the subagent wasn't offered is answered as one there isn't".
      if (entry === undefined) return { text: `there is no tool ${name}`, error: true };
      if (this.ended.signal.aborted || this.host.closed) return { text: `${name} was called after its turn ended`, error: true };
      const down = this.unavailable.get(entry.tool);
      if (down !== undefined) return unavailable(entry.tool, down);
      if (signal?.aborted) return { text: `${name} was cancelled`, error: true };
      return entry.tool === MEMORY_TOOL ? await this.callKept(entry, args, signal) : await this.callOwn(entry, args, signal);
    } catch (e) {
      return { text: `${name} failed: ${message(e)}`, error: true };
    }
  }

  async close(): Promise<void> {
    if (!this.ended.signal.aborted) {
      this.ended.abort();
      for (const held of this.sessions.values()) this.end(held);
      this.sessions.clear();
    }
    await Promise.all([...this.ending]);
    this.host.forget(this);
  }

  private async callOwn(entry: Entry, args: Record<string, unknown>, signal?: AbortSignal): Promise<ToolAnswer> {
    const current = this.sessions.get(entry.key);
    if (current?.lost) this.drop(current, entry.key);
    let held = this.sessions.get(entry.key);
    if (held === undefined) {
      // Set before any await, so the calls of one round share one session.
      held = this.host.startSession(entry.server, this.ended.signal, Held);
      this.sessions.set(entry.key, held);
    }
    const mine = held;
    return this.callOn(mine, entry, args, signal, () => this.drop(mine, entry.key));
  }

  private async callKept(entry: Entry, args: Record<string, unknown>, signal?: AbortSignal): Promise<ToolAnswer> {
    const kept = this.host.keptFor(entry.server);
    kept.active += 1;
    clearTimeout(kept.idle);
    try {
      return await this.callOn(kept, entry, args, signal, () => this.host.retire(kept));
    } finally {
      this.host.release(kept);
    }
  }

  private async callOn(
    held: Held,
    entry: Entry,
    args: Record<string, unknown>,
    signal: AbortSignal | undefined,
    lose: () => void,
  ): Promise<ToolAnswer> {
    let session: ToolSession;
    try {
      session = await abortable(held.start, signal);
    } catch (e) {
      if (signal?.aborted) return { text: `${entry.name} was cancelled`, error: true };
      // Spec: "A tool that fails to start after it was listed is still offered, and a call to it is answered as unavailable."
      this.unavailable.set(entry.tool, message(e));
      lose();
      return unavailable(entry.tool, message(e));
    }
    try {
      return await session.call(entry.name, entry.call, args, { ...this.bounds, ...(signal ? { signal } : {}) });
    } catch (e) {
      if (!(e instanceof SessionLost)) throw e;
      // Dropped, so the next call or turn starts it again.
      lose();
      return { text: e.message, error: true };
    }
  }

  private drop(held: Held, key: string): void {
    if (this.sessions.get(key) === held) this.sessions.delete(key);
    this.end(held);
  }

  private end(held: Held): void {
    const done = held.close();
    this.ending.add(done);
    this.host.track(done);
    void done.then(() => this.ending.delete(done));
  }
}

function unavailable(tool: string, why: string): ToolAnswer {
  return { text: `tool ${tool} is unavailable: ${why}`, error: true };
}

/** The same tool by name and source: a name that points elsewhere is another tool with its own list. */
function sourceKey(server: ToolServer): string {
  const s = server.source;
  return s.type === "stdio"
    ? JSON.stringify([server.name, s.type, s.command, s.args, Object.entries(s.env ?? {}).sort(), s.cwd ?? null])
    : JSON.stringify([server.name, s.type, s.url, Object.entries(s.headers ?? {}).sort()]);
}

function uniqueSorted(servers: readonly ToolServer[]): ToolServer[] {
  const byName = new Map<string, ToolServer>();
  for (const s of servers) if (!byName.has(s.name)) byName.set(s.name, s);
  return [...byName.values()].sort((a, b) => compare(a.name, b.name));
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** Waits for `p`, or rejects as soon as `signal` aborts (the work behind `p` goes on). */
function abortable<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return p;
  if (signal.aborted) return Promise.reject(new Error("cancelled"));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(new Error("cancelled"));
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
