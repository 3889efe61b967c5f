// One MCP session with one tool: start it (stdio child or Streamable HTTP), list its calls, call
// one, end it. The MCP SDK is loaded on first use so the daemon answers `initialize` fast.
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult, Tool } from "@modelcontextprotocol/sdk/types.js";
import type { Redactor } from "../../turn/redact.js";
import type { ToolAnswer, ToolMedia, ToolServer } from "../../turn/tools.js";
import type { ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { isFolder } from "../../store/index.js";
import { lazy, lazyImport } from "../../turn/load.js";
import { log } from "../log.js";
import { boundedFetch } from "./fetch.js";
import { LineReadBuffer } from "./lines.js";
import { LISTED_CHARS_MAX, LISTED_MAX, listedCall } from "./offer.js";

const CLIENT_INFO = { name: "lnk-link-harness", version: "0.1.0" };
/** Bounds on ending a session: the SDK's own stdio close escalates stdin end → SIGTERM → SIGKILL, 2 s apart. */
const TERMINATE_MS = 2_000;
const EXIT_MS = 6_000;
/**
 * The most a stdio tool may leave unread of what it was sent (the answers to its own requests, its
 * pings, say): past it, its session is ended, rather than the process holding whatever it floods.
 */
export const TOOL_UNREAD_MAX = 1024 * 1024;
/**
 * The most answers to its own requests (its pings, say) a tool over HTTP may leave unanswered at
 * once: each is a POST of its own, on a connection of its own while it waits. Past it, its session
 * is ended, rather than the process opening connections (and files) for whatever it floods.
 */
export const TOOL_ANSWERS_WAITING_MAX = 64;

const MAX_LIST_PAGES = 100;
const STDERR_KEPT = 2_000;

/** A process's children, by /proc (Linux): each task's; none where /proc can't say. */
function childrenOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((task) =>
      readFileSync(`/proc/${pid}/task/${task}/children`, "latin1")
        .split(" ")
        .filter(Boolean)
        .map(Number),
    );
  } catch {
    return [];
  }
}

/** When a process started, in clock ticks since boot (/proc/PID/stat's 22nd field): a pid used again has another. */
function startOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

/**
 * The variable each stdio tool is started with, its value the session's own: what the tool starts
 * inherits it, so those left once the tool has exited (their parent gone, they are no longer under
 * it) are still found. Not LNK_TOOL_*, which names a tool to a daemon the tool might start.
 */
const RUN_VAR = "LINK_HARNESS_TOOL_RUN";

/** Every process of this user started with RUN_VAR=`mark`, each with when it started: none where /proc can't say. */
function marked(mark: string): [number, string][] {
  const needle = `${RUN_VAR}=${mark}\0`;
  const found: [number, string][] = [];
  let names: string[];
  try {
    names = readdirSync("/proc");
  } catch {
    return found;
  }
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (!readFileSync(`/proc/${name}/environ`, "latin1").includes(needle)) continue;
    } catch {
      // Another user's, or gone.
      continue;
    }
    const start = startOf(Number(name));
    if (start !== undefined) found.push([Number(name), start]);
  }
  return found;
}

/** Ends each process of `pids` that is still the one it was (its start the same), at once. */
function killAll(pids: readonly [number, string][]): void {
  for (const [pid, start] of pids) {
    try {
      if (startOf(pid) === start) process.kill(pid, "SIGKILL");
    } catch {
      // Gone already.
    }
  }
}

/**
 * The stdio tools running, by their session's mark: a process that exits at once (a second signal
 * while it stops) ends each, and what each started, rather than leave them running.
 */
const liveTools = new Map<string, ChildProcess>();
process.on("exit", () => {
  for (const [mark, child] of liveTools) {
    const pid = child.pid;
    killAll([...(pid !== undefined ? descendants(pid) : []), ...marked(mark)]);
    try {
      child.kill("SIGKILL");
    } catch {
      // Gone already.
    }
  }
});

/** Every process under `pid` (its children, theirs, ...), each with when it started. */
function descendants(pid: number): [number, string][] {
  const found: [number, string][] = [];
  const seen = new Set<number>([pid]);
  for (let next = childrenOf(pid); next.length > 0; ) {
    const fresh = next.filter((p) => !seen.has(p));
    for (const p of fresh) {
      seen.add(p);
      const start = startOf(p);
      if (start !== undefined) found.push([p, start]);
    }
    next = fresh.flatMap(childrenOf);
  }
  return found;
}

// Each module of the SDK is loaded again after a failed load (turn/load.ts), never kept failed.
const sdkUrl = (path: string) => () => import.meta.resolve(`@modelcontextprotocol/sdk/${path}`);
const sdkModules = [
  lazyImport(() => import("@modelcontextprotocol/sdk/client/index.js"), sdkUrl("client/index.js")),
  lazyImport(() => import("@modelcontextprotocol/sdk/client/stdio.js"), sdkUrl("client/stdio.js")),
  lazyImport(() => import("@modelcontextprotocol/sdk/client/streamableHttp.js"), sdkUrl("client/streamableHttp.js")),
  lazyImport(() => import("@modelcontextprotocol/sdk/types.js"), sdkUrl("types.js")),
  lazyImport(() => import("@modelcontextprotocol/sdk/shared/stdio.js"), sdkUrl("shared/stdio.js")),
] as const;

async function importSdk() {
  const [client, stdio, http, types, shared] = await Promise.all([sdkModules[0](), sdkModules[1](), sdkModules[2](), sdkModules[3](), sdkModules[4]()]);
  return {
    Client: client.Client,
    StdioClientTransport: stdio.StdioClientTransport,
    getDefaultEnvironment: stdio.getDefaultEnvironment,
    deserializeMessage: shared.deserializeMessage,
    STDIO_DEFAULT_MAX_BUFFER_SIZE: shared.STDIO_DEFAULT_MAX_BUFFER_SIZE,
    StreamableHTTPClientTransport: http.StreamableHTTPClientTransport,
    CallToolResultSchema: types.CallToolResultSchema,
    McpError: types.McpError,
    ErrorCode: types.ErrorCode,
  };
}
type Sdk = Awaited<ReturnType<typeof importSdk>>;
const loadSdk: () => Promise<Sdk> = lazy(importSdk);

/**
 * The stdio transport's buffer of what the tool writes, replaced before it starts by one that joins
 * each line once (daemon/tools/lines.ts), with the SDK's bound. The SDK keeps it in a field of its
 * own: a version that no longer does fails the test that checks it (test/tool-lines.test.ts), where this
 * would leave the SDK's buffer in place.
 */
export function readLinesWhole(transport: StdioClientTransport, sdk: Pick<Sdk, "deserializeMessage" | "STDIO_DEFAULT_MAX_BUFFER_SIZE">): boolean {
  const inner = transport as unknown as { _readBuffer?: unknown };
  if (inner._readBuffer === undefined) return false;
  inner._readBuffer = new LineReadBuffer(sdk.STDIO_DEFAULT_MAX_BUFFER_SIZE, sdk.deserializeMessage);
  return true;
}

/** A stdio tool's process, as the SDK's transport holds it (its own field): undefined for HTTP, or once it is gone. */
function childOf(transport: StdioClientTransport | StreamableHTTPClientTransport): ChildProcess | undefined {
  return (transport as unknown as { _process?: ChildProcess })._process;
}

/**
 * What a stdio tool is sent waits in its stdin's buffer while it reads none of it; the SDK answers
 * each of its requests (a ping, say) whatever it reads. Past TOOL_UNREAD_MAX waiting, nothing more
 * is sent and its session is ended (`end`).
 */
function boundUnread(transport: StdioClientTransport, end: () => void): void {
  const send = transport.send.bind(transport);
  transport.send = (message) => {
    const unread = childOf(transport)?.stdin?.writableLength ?? 0;
    if (unread > TOOL_UNREAD_MAX) {
      end();
      return Promise.reject(new Error(`the tool read none of the last ${unread} bytes it was sent: its session is ended`));
    }
    return send(message);
  };
}

/**
 * What a tool over HTTP is sent in answer to its own requests is a POST that waits for the tool's
 * reply; past TOOL_ANSWERS_WAITING_MAX waiting at once, nothing more is sent and its session is
 * ended (`end`). The client's own requests are not counted: a turn may make many calls at once.
 */
function boundAnswersWaiting(transport: StreamableHTTPClientTransport, end: () => void): void {
  const send = transport.send.bind(transport);
  let waiting = 0;
  transport.send = async (message, options) => {
    if (!("result" in message || "error" in message)) return send(message, options);
    if (waiting >= TOOL_ANSWERS_WAITING_MAX) {
      end();
      throw new Error(`the tool left ${waiting} answers to its own requests waiting: its session is ended`);
    }
    waiting++;
    try {
      return await send(message, options);
    } finally {
      waiting--;
    }
  };
}

/** A call a tool lists, as the MCP server names it. */
export interface ListedCall {
  call: string;
  description: string;
  parameters: Record<string, unknown>;
  /** Why it can't be offered, when it can't (its name or schema too long: kept without them). */
  unfit?: string;
}

export interface CallOptions {
  signal?: AbortSignal;
  /** The longest the call may go without an answer or a progress report (timeouts.tool_idle). */
  timeoutMs: number;
  /** The longest it may take, progress or not (timeouts.tool_call). */
  totalMs: number;
}

/** The total bound of a call ran out: the call is cancelled (the tool is told), as a timeout. */
class TotalBound {}

/**
 * A signal that follows `parent` until `done()`. The SDK adds a listener to a request's signal and
 * never takes it off: it gets this one, dropped with the request, never a turn's or the host's, on
 * which eight rounds of calls would leave as many listeners.
 */
function follow(parent: AbortSignal | undefined): { controller: AbortController; done(): void } {
  const controller = new AbortController();
  const abort = (): void => controller.abort(parent?.reason);
  if (parent?.aborted) abort();
  else parent?.addEventListener("abort", abort, { once: true });
  return { controller, done: () => parent?.removeEventListener("abort", abort) };
}

const seconds = (ms: number): string => String(Number((ms / 1000).toFixed(3)));

/** Thrown by `call` when the session can't be used again (it closed, or the call timed out). */
export class SessionLost extends Error {}

export class ToolSession {
  /** Set once the connection is gone: the next call needs a new session. */
  lost = false;
  private ending: Promise<void> | undefined;
  private stderrTail = "";

  private constructor(
    readonly tool: string,
    private readonly sdk: Sdk,
    private readonly client: Client,
    private readonly transport: StdioClientTransport | StreamableHTTPClientTransport,
    private readonly exited: Promise<void>,
    private readonly secrets: Redactor,
    /** A stdio tool's RUN_VAR value, which what it starts inherits. */
    private readonly mark?: string,
  ) {}

  /**
   * Starts a session; throws with a reason a person can read. Never leaves a child behind. A stdio
   * tool starts in its source's `cwd`; what it writes on stderr is logged with `secrets` taken out.
   */
  static async start(server: ToolServer, timeoutMs: number, secrets: Redactor, signal?: AbortSignal): Promise<ToolSession> {
    const sdk = await loadSdk();
    const source = server.source;
    // Else the child's spawn fails as if its command were missing (ENOENT).
    if (source.type === "stdio" && source.cwd !== undefined && !isFolder(source.cwd)) {
      throw new Error(`it can't start in ${source.cwd}: there is no such folder`);
    }
    const mark = source.type === "stdio" ? randomBytes(12).toString("hex") : undefined;
    const transport =
      source.type === "stdio"
        ? new sdk.StdioClientTransport({
            command: source.command,
            args: source.args,
            env: { ...sdk.getDefaultEnvironment(), ...source.env, [RUN_VAR]: mark as string },
            ...(source.cwd !== undefined ? { cwd: source.cwd } : {}),
            stderr: "pipe",
          })
        : new sdk.StreamableHTTPClientTransport(new URL(source.url), { requestInit: { headers: source.headers ?? {} }, fetch: boundedFetch() });
    if (source.type === "stdio") {
      readLinesWhole(transport as StdioClientTransport, sdk);
      boundUnread(transport as StdioClientTransport, () => void session.close());
    } else boundAnswersWaiting(transport as StreamableHTTPClientTransport, () => void session.close());
    // Set before connect so the Client chains it: for stdio it fires when the child has exited.
    const exited = new Promise<void>((resolve) => {
      transport.onclose = () => resolve();
    });
    const client = new sdk.Client(CLIENT_INFO, { capabilities: {} });
    const session = new ToolSession(server.name, sdk, client, transport, exited, secrets, mark);
    if ("stderr" in transport) {
      // Drained always: an unread pipe would stall a chatty child.
      transport.stderr?.on("data", (chunk: Buffer) => session.keepStderr(chunk.toString("utf8")));
    }
    client.onclose = () => {
      session.lost = true;
    };
    client.onerror = (error) => log.debug("tool session error", { tool: server.name, error: secrets.redact(error.message) });
    const own = follow(signal);
    try {
      await client.connect(transport, { timeout: timeoutMs, signal: own.controller.signal });
    } catch (e) {
      await session.close();
      throw new Error(session.describe(e), { cause: e });
    } finally {
      own.done();
    }
    // A tool that exits on its own mid-session: what it started and left would hold its pipes open,
    // and a call under way would wait for an answer until its timeout. They are ended now, so the
    // session is seen to be lost at once, and its call fails saying so.
    const child = childOf(transport);
    if (mark !== undefined && child) liveTools.set(mark, child);
    child?.once("exit", () => {
      if (mark !== undefined) liveTools.delete(mark);
      if (session.ending !== undefined) return;
      if (mark !== undefined) killAll(marked(mark));
      session.lost = true;
      void session.close();
    });
    return session;
  }

  /** The child's pid, for stdio tools. */
  get pid(): number | undefined {
    return "pid" in this.transport ? (this.transport.pid ?? undefined) : undefined;
  }

  /**
   * The calls the tool lists, in its order, as they are kept (`listed`): the first LISTED_MAX of
   * them, within LISTED_CHARS_MAX in all (a list of thousands, or of megabytes, is not read to its
   * end, and what is past the bound is said in the log); calls that need MCP tasks are left out
   * (tools/call can't run them).
   */
  async list(timeoutMs: number, signal?: AbortSignal): Promise<ListedCall[]> {
    const calls: ListedCall[] = [];
    let chars = 0;
    let cursor: string | undefined;
    for (let page = 0; page < MAX_LIST_PAGES; page++) {
      const own = follow(signal);
      const result = await this.client
        .listTools(cursor === undefined ? {} : { cursor }, { timeout: timeoutMs, signal: own.controller.signal })
        .finally(own.done);
      for (const tool of result.tools) {
        if (tool.execution?.taskSupport === "required") continue;
        const { listed: call, chars: size } = listed(tool);
        chars += size;
        if (calls.length >= LISTED_MAX || chars > LISTED_CHARS_MAX) {
          log.warn("a tool's list is read no further", { tool: this.tool, calls: calls.length, why: calls.length >= LISTED_MAX ? `past the ${LISTED_MAX} calls of a tool's list read` : `past the ${LISTED_CHARS_MAX} characters of a tool's list read` });
          return calls;
        }
        calls.push(call);
      }
      cursor = result.nextCursor;
      if (cursor === undefined) break;
    }
    return calls;
  }

  /**
   * One call. An `isError` result is an answer; a thrown MCP error (the server died, a timeout) is
   * SessionLost, any other thrown error an answer, and an aborted signal `cancelled`. A call that
   * reports progress goes on past `timeoutMs`, never past `totalMs`.
   */
  async call(name: string, call: string, args: Record<string, unknown>, opts: CallOptions): Promise<ToolAnswer> {
    const own = follow(opts.signal);
    const bound = setTimeout(() => own.controller.abort(new TotalBound()), opts.totalMs);
    try {
      const result = await this.client.request(
        { method: "tools/call", params: { name: call, arguments: args } },
        this.sdk.CallToolResultSchema,
        {
          timeout: opts.timeoutMs,
          // A tool that reports progress is still working: its timeout starts again, up to the total.
          resetTimeoutOnProgress: true,
          maxTotalTimeout: opts.totalMs,
          onprogress: () => {},
          signal: own.controller.signal,
        },
      );
      const media = mediaOf(result);
      return { text: answerText(result), error: result.isError === true, ...(media.length > 0 ? { media } : {}) };
    } catch (e) {
      if (opts.signal?.aborted) return { text: `${name} was cancelled`, error: true };
      const what = this.failure(e, opts, own.controller.signal.reason instanceof TotalBound);
      if (this.lost || own.controller.signal.aborted || this.isSessionError(e)) {
        this.lost = true;
        throw new SessionLost(`${name} ${what}`);
      }
      return { text: `${name} ${what}`, error: true };
    } finally {
      clearTimeout(bound);
      own.done();
    }
  }

  /** Ends the session and waits for its child to exit. Safe to call more than once. */
  close(): Promise<void> {
    this.ending ??= this.end();
    return this.ending;
  }

  private async end(): Promise<void> {
    this.lost = true;
    if ("terminateSession" in this.transport && this.transport.sessionId !== undefined) {
      // Ends the server's side of an HTTP session, so it keeps nothing of this one.
      await within(this.transport.terminateSession(), TERMINATE_MS).catch(() => {});
    }
    // A stdio tool's own children (an npx's node, a server's workers) that outlive it would hold its
    // pipes open, and the session's end would wait on them: ended with it, once it has exited.
    const child = childOf(this.transport);
    const running = child !== undefined && child.exitCode === null && child.signalCode === null;
    // Under it while it runs; once it has exited (or the SDK let it go), found by the variable they inherited.
    const under = running && child.pid !== undefined ? descendants(child.pid) : this.mark !== undefined ? marked(this.mark) : [];
    const reap = () => {
      killAll(under);
      child?.stdout?.destroy();
      child?.stderr?.destroy();
    };
    if (running) child.once("exit", reap);
    await this.client.close().catch(() => {});
    if (!running) reap();
    await within(this.exited, EXIT_MS).catch(() => {});
  }

  private isSessionError(e: unknown): boolean {
    const { McpError, ErrorCode } = this.sdk;
    if (e instanceof McpError) return e.code === ErrorCode.ConnectionClosed || e.code === ErrorCode.RequestTimeout;
    // Not an answer from the server: the transport failed ("Not connected", a fetch that failed).
    return true;
  }

  private keepStderr(text: string): void {
    this.stderrTail = (this.stderrTail + text).slice(-STDERR_KEPT);
    if (process.env.LNK_DEBUG) log.debug("tool stderr", { tool: this.tool, text: this.secrets.redact(text.trimEnd()) });
  }

  /** What became of a call that threw: a bound of the settings that ran out, in their words, or the error. */
  private failure(e: unknown, bounds: CallOptions, totalRanOut: boolean): string {
    const { McpError, ErrorCode } = this.sdk;
    // Ours ran out (and cancelled the call), or the SDK's own total, checked at each progress report.
    if (totalRanOut || (e instanceof McpError && /Maximum total timeout/.test(e.message))) {
      return `was still running after ${seconds(bounds.totalMs)} s, the most a tool call may take (timeouts.tool_call)`;
    }
    if (e instanceof McpError && e.code === ErrorCode.RequestTimeout) {
      return `sent no answer or progress for ${seconds(bounds.timeoutMs)} s (timeouts.tool_idle)`;
    }
    return `failed: ${this.describe(e)}`;
  }

  /** An error, with the last line the tool wrote on stderr when there is one. */
  describe(e: unknown): string {
    const message = e instanceof Error ? e.message : String(e);
    const last = this.stderrTail
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l !== "")
      .pop();
    return last === undefined ? message : `${message} (stderr: ${last})`;
  }
}

/** A call as the MCP server lists it, as it is kept, and the characters it is kept in (offer.ts listedCall). */
function listed(tool: Tool): { listed: ListedCall; chars: number } {
  // `$schema` is left out: some providers refuse it in a function's parameters.
  const { $schema: _schema, ...parameters } = tool.inputSchema;
  return listedCall(tool.name, tool.description ?? tool.title ?? "", parameters);
}

/** The most of an image a call's answer shows the client, in bytes of its data (a message's part may be 10 MiB). */
const MEDIA_MAX = 10 * 1024 * 1024;

/**
 * The most resource links of one answer shown to the client and named in its text: the rest are
 * counted, as left out. A tool's answer of 100,000 links was one update of megabytes to the client.
 */
export const LINKS_MAX = 100;

/** What a result showed beside its text, for the client: its images (each at most 10 MiB) and its first LINKS_MAX resource links. */
export function mediaOf(result: CallToolResult): ToolMedia[] {
  const out: ToolMedia[] = [];
  let links = 0;
  for (const item of result.content) {
    if (item.type === "image" && Buffer.byteLength(item.data, "base64") <= MEDIA_MAX) out.push({ type: "image", data: item.data, mimeType: item.mimeType });
    else if (item.type === "resource_link" && links++ < LINKS_MAX) out.push({ type: "resource_link", uri: item.uri, name: item.name, ...(item.mimeType ? { mimeType: item.mimeType } : {}) });
  }
  return out;
}

/** A result as text: text items as they are, other content described, structured content when there is no text. */
export function answerText(result: CallToolResult): string {
  const parts: string[] = [];
  let hasText = false;
  let links = 0;
  for (const item of result.content) {
    switch (item.type) {
      case "text":
        hasText = true;
        parts.push(item.text);
        break;
      case "image":
      case "audio":
        parts.push(`[${item.type} ${item.mimeType}, ${Buffer.byteLength(item.data, "base64")} bytes]`);
        break;
      case "resource": {
        const r = item.resource;
        if ("text" in r && typeof r.text === "string") {
          hasText = true;
          parts.push(`[resource ${r.uri}]\n${r.text}`);
        } else {
          const size = "blob" in r && typeof r.blob === "string" ? `, ${Buffer.byteLength(r.blob, "base64")} bytes` : "";
          parts.push(`[resource ${r.uri}${r.mimeType ? ` ${r.mimeType}` : ""}${size}]`);
        }
        break;
      }
      case "resource_link":
        if (links++ < LINKS_MAX) parts.push(`[resource_link ${item.uri}${item.name ? ` ${item.name}` : ""}${item.description ? `: ${item.description}` : ""}]`);
        break;
      default: {
        const never: never = item;
        parts.push(JSON.stringify(never));
      }
    }
  }
  if (links > LINKS_MAX) parts.push(`[${links - LINKS_MAX} more resource links left out: an answer shows at most ${LINKS_MAX}]`);
  if (!hasText && result.structuredContent !== undefined) parts.push(JSON.stringify(result.structuredContent));
  return parts.join("\n");
}

/** Resolves or rejects as `p` does, or rejects after `ms`. */
export function within<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
