// The command line: parses argv into one command, or a clear one-line error.
import { parseArgs } from "node:util";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import type { AgentRef } from "../store/paths.js";
import { nearest } from "../protocol/names.js";

/** Bad input on the command line (or in a file it names): one line on stderr, exit 2. */
export class UsageError extends Error {
  readonly exitCode = 2;
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

export interface AgentOptions {
  agent: string;
  files?: string;
  home?: string;
}

export type Command =
  | { kind: "help" }
  | { kind: "version" }
  | { kind: "contract" }
  | { kind: "configure"; agent: AgentOptions; file?: string }
  | { kind: "state"; agent: AgentOptions; export: boolean }
  | { kind: "state import"; agent: AgentOptions; file?: string; from?: { harness: "openclaw"; dir: string } }
  | { kind: "facts"; agent: AgentOptions; model?: string }
  | { kind: "usage"; agent: AgentOptions; thread?: string; since?: Date; json: boolean }
  | { kind: "instructions"; agent: AgentOptions; thread?: string }
  | { kind: "conversation"; agent: AgentOptions; thread: string; json: boolean }
  | { kind: "conversations move out"; agent: AgentOptions; threads: string[] }
  | { kind: "conversations move in"; agent: AgentOptions; file?: string }
  | { kind: "serve"; agent: AgentOptions; socket?: string; port?: number; agents?: string; blank?: string };

export const USAGE = `usage:
  lnk-link-harness contract                        print the Contract as JSON
  lnk-link-harness configure [--agent DIR] [FILE]  validate settings (FILE or stdin) and write config.json
  lnk-link-harness state [--agent DIR]             print the paths a move carries
  lnk-link-harness state export [--agent DIR]      print the agent's own instructions, skills and memory as ASP State
  lnk-link-harness state import [--agent DIR] [FILE]
                                                   take an ASP State (FILE or stdin) into the agent's folder
  lnk-link-harness state import --from openclaw [--agent DIR] DIR
                                                   take an OpenClaw state folder's agent into the agent's folder
  lnk-link-harness facts [--agent DIR] [MODEL]     print the window and answer share a turn would use, and where each came from
  lnk-link-harness instructions [--agent DIR] [--thread T]
                                                   print the system prompt a turn would send now, by section
  lnk-link-harness conversation [--agent DIR] THREAD [--json]
                                                   print one conversation for a person, or in the portable form
  lnk-link-harness conversations move out [--agent DIR] [THREAD...]
                                                   print conversations (all when none is named) in the portable form
  lnk-link-harness conversations move in [--agent DIR] [FILE]
                                                   take conversations in the portable form (FILE or stdin)
  lnk-link-harness usage [--agent DIR] [THREAD] [--since DATE] [--json]
                                                   tokens, the cached share, cost, and why a cache missed
  lnk-link-harness [--agent DIR] [--files DIR] [--home DIR] [--socket PATH] [--port N]
                                                   serve ACP on stdio, or on a Unix socket (mode 0600),
                                                   or on 127.0.0.1:N ($LNK_PORT when set)
  lnk-link-harness --agents FILE                   serve each agent FILE names on its own port, and on stdio
  lnk-link-harness --blank CONTROL [--socket PATH] [--port N]
                                                   start blank: wait for one Bind line on the socket CONTROL
  lnk-link-harness --help | --version
See man lnk-link-harness.`;

/** The agent's folder when no --agent is given: $LNK_AGENT_DIR, else under $XDG_DATA_HOME. */
export function defaultAgentDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.LNK_AGENT_DIR) {
    checkTilde("LNK_AGENT_DIR", env.LNK_AGENT_DIR);
    return resolve(env.LNK_AGENT_DIR);
  }
  const data = env.XDG_DATA_HOME || join(homedir(), ".local", "share");
  return join(data, "lnk-link-harness", "agent");
}

const OPTIONS = {
  help: { type: "boolean", short: "h" },
  version: { type: "boolean", short: "V" },
  agent: { type: "string" },
  files: { type: "string" },
  home: { type: "string" },
  socket: { type: "string" },
  port: { type: "string" },
  agents: { type: "string" },
  blank: { type: "string" },
  since: { type: "string" },
  json: { type: "boolean" },
  thread: { type: "string" },
  from: { type: "string" },
} as const;

/** A date or a time with its zone, as ISO 8601 writes them: 2026-11-30, 2026-11-30T21:00Z. */
const DATE = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2}))?$/;

function parseSince(value: string): Date {
  const at = DATE.test(value) ? new Date(value.length === 10 ? `${value}T00:00:00Z` : value.replace(" ", "T")) : undefined;
  // A day the month has: Date takes 2026-02-30 as 2 March.
  const [y, m, d] = value.slice(0, 10).split("-").map(Number) as [number, number, number];
  const day = new Date(Date.UTC(y, m - 1, d));
  if (!at || Number.isNaN(at.getTime()) || day.getUTCMonth() !== m - 1 || day.getUTCDate() !== d) {
    throw new UsageError(`--since ${JSON.stringify(value.slice(0, 40))}: not a date; write one as 2026-11-30 (UTC) or 2026-11-30T21:00Z`);
  }
  return at;
}

/** An option the command line doesn't know, named, with the one meant when it is close to one. */
function unknownOption(arg: string): UsageError {
  const name = arg.replace(/^-+/, "").split("=")[0] ?? "";
  const near = nearest(name, Object.keys(OPTIONS))[0];
  return new UsageError(`unknown option ${arg.split("=")[0]}${near ? `: did you mean --${near}?` : ""} (see --help)`);
}

/**
 * Refuses a path that begins with a literal `~`: no shell expanded it (a command line given as one
 * string, as acpx and Link's own config spawn it), so it would name a folder called `~` here.
 */
function checkTilde(what: string, value: string): void {
  if (!value.startsWith("~")) return;
  const rest = value.slice(1);
  const hint = rest === "" || rest.startsWith("/") ? `write $HOME${rest} (or the full path) instead` : "write the full path instead";
  throw new UsageError(`${what} ${JSON.stringify(value)}: a path that begins with "~" is not expanded here, since no shell saw it: ${hint}`);
}

/** A port to serve on: a whole number from 0 (any free port, said in the log) to 65535. */
export function parsePort(what: string, raw: string): number {
  const text = raw.trim();
  const n = Number(text);
  if (!/^\d{1,5}$/.test(text) || n > 65535) throw new UsageError(`${what} ${JSON.stringify(raw.slice(0, 40))}: a port is a whole number from 0 to 65535`);
  return n;
}

export function parseCommandLine(argv: string[], env: NodeJS.ProcessEnv = process.env): Command {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, strict: true, options: OPTIONS });
  } catch (e) {
    if ((e as { code?: string }).code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") {
      const arg = /'([^']+)'/.exec((e as Error).message)?.[1];
      if (arg !== undefined) throw unknownOption(arg);
    }
    throw new UsageError((e as Error).message.split("\n")[0] ?? "bad arguments");
  }
  const { values: v, positionals } = parsed;
  if (v.help) return { kind: "help" };
  if (v.version) return { kind: "version" };
  for (const [name, value] of Object.entries(v)) {
    if (typeof value === "string" && value.length === 0) throw new UsageError(`--${name} needs a value`);
    if (typeof value === "string" && name !== "port") checkTilde(`--${name}`, value);
  }
  const agent: AgentOptions = {
    agent: v.agent ? resolve(v.agent) : defaultAgentDir(env),
    ...(v.files ? { files: resolve(v.files) } : {}),
    ...(v.home ? { home: resolve(v.home) } : {}),
  };
  const [verb, ...rest] = positionals;
  const only = (allowed: string[], what: string) => {
    for (const name of Object.keys(v)) {
      if (!allowed.includes(name)) throw new UsageError(`${what} takes no --${name}`);
    }
  };
  switch (verb) {
    case undefined: {
      if (v.since !== undefined || v.json) throw new UsageError(`serving takes no --${v.since !== undefined ? "since" : "json"}: did you mean lnk-link-harness usage?`);
      if (v.thread !== undefined) throw new UsageError("serving takes no --thread: did you mean lnk-link-harness instructions?");
      if (v.blank && (v.agent || v.agents)) throw new UsageError("--blank starts with no agent: it takes no --agent or --agents");
      if (v.agents && v.agent) throw new UsageError("--agents names each agent's folders: it takes no --agent");
      if (v.agents && (v.socket || v.port)) throw new UsageError("--agents serves each agent on the port its file names: it takes no --socket or --port");
      if (v.blank && (v.files || v.home)) throw new UsageError("--blank takes the agent's folders from its Bind: it takes no --files or --home");
      // LNK_PORT is --port's default, where no other endpoint is named.
      const port = v.port !== undefined ? parsePort("--port", v.port) : !v.socket && !v.agents && env.LNK_PORT ? parsePort("LNK_PORT", env.LNK_PORT) : undefined;
      return {
        kind: "serve",
        agent,
        ...(v.socket ? { socket: resolve(v.socket) } : {}),
        ...(port !== undefined ? { port } : {}),
        ...(v.agents ? { agents: resolve(v.agents) } : {}),
        ...(v.blank ? { blank: resolve(v.blank) } : {}),
      };
    }
    case "contract":
      only([], "contract");
      if (rest.length > 0) throw new UsageError(`contract takes no argument, got ${JSON.stringify(rest[0])}`);
      return { kind: "contract" };
    case "configure":
      only(["agent", "files", "home"], "configure");
      if (rest.length > 1) throw new UsageError("configure takes at most one FILE");
      if (rest[0] !== undefined) checkTilde("FILE", rest[0]);
      return { kind: "configure", agent, ...(rest[0] !== undefined ? { file: resolve(rest[0]) } : {}) };
    case "state": {
      const [sub, ...more] = rest;
      only(sub === "import" ? ["agent", "files", "home", "from"] : ["agent", "files", "home"], "state");
      if (sub === "import" && v.from !== undefined) {
        if (v.from !== "openclaw") throw new UsageError(`--from ${JSON.stringify(v.from.slice(0, 40))}: state import reads another harness's folder from openclaw only`);
        if (more.length !== 1 || more[0] === undefined) throw new UsageError("state import --from openclaw takes one DIR: the OpenClaw state folder (~/.openclaw, or a folder holding state/ and workspace/)");
        checkTilde("DIR", more[0]);
        return { kind: "state import", agent, from: { harness: "openclaw", dir: resolve(more[0]) } };
      }
      if (sub === "import") {
        if (more.length > 1) throw new UsageError("state import takes at most one FILE");
        if (more[0] !== undefined) checkTilde("FILE", more[0]);
        return { kind: "state import", agent, ...(more[0] !== undefined ? { file: resolve(more[0]) } : {}) };
      }
      if (more.length > 0 || (sub !== undefined && sub !== "export")) {
        throw new UsageError(`state takes only "export" or "import", got ${JSON.stringify(sub === "export" ? more[0] : sub)}`);
      }
      return { kind: "state", agent, export: sub === "export" };
    }
    case "facts": {
      only(["agent", "files", "home"], "facts");
      if (rest.length > 1) throw new UsageError("facts takes at most one MODEL");
      const model = rest[0]?.trim();
      if (rest[0] !== undefined && !model) throw new UsageError("facts: MODEL is a model's name");
      return { kind: "facts", agent, ...(model ? { model } : {}) };
    }
    case "usage": {
      only(["agent", "since", "json"], "usage");
      if (rest.length > 1) throw new UsageError(`usage takes at most one THREAD, got ${JSON.stringify(rest[1])}`);
      // The thread's name is checked where the conversation is read, which loads what checks it.
      const thread = rest[0];
      return {
        kind: "usage",
        agent,
        ...(thread !== undefined ? { thread } : {}),
        ...(v.since !== undefined ? { since: parseSince(v.since) } : {}),
        json: v.json === true,
      };
    }
    case "instructions":
      only(["agent", "files", "home", "thread"], "instructions");
      if (rest.length > 0) throw new UsageError(`instructions takes no argument, got ${JSON.stringify(rest[0])} (a conversation is named with --thread)`);
      // The thread's name is checked where the conversation is read, which loads what checks it.
      return { kind: "instructions", agent, ...(v.thread !== undefined ? { thread: v.thread } : {}) };
    case "conversation": {
      only(["agent", "json"], "conversation");
      if (rest.length !== 1) throw new UsageError(rest.length === 0 ? "conversation takes a THREAD" : `conversation takes one THREAD, got ${JSON.stringify(rest[1])} too`);
      // The thread's name is checked where the conversation is read, which loads what checks it.
      return { kind: "conversation", agent, thread: rest[0] ?? "", json: v.json === true };
    }
    case "conversations": {
      only(["agent"], "conversations");
      const [move, way, ...more] = rest;
      if (move !== "move") throw new UsageError(`conversations takes "move out" or "move in", got ${JSON.stringify(move ?? "nothing")}`);
      if (way === "out") return { kind: "conversations move out", agent, threads: more };
      if (way === "in") {
        if (more.length > 1) throw new UsageError("conversations move in takes at most one FILE");
        if (more[0] !== undefined) checkTilde("FILE", more[0]);
        return { kind: "conversations move in", agent, ...(more[0] !== undefined ? { file: resolve(more[0]) } : {}) };
      }
      throw new UsageError(`conversations move takes "out" or "in", got ${JSON.stringify(way ?? "nothing")}`);
    }
    default:
      throw new UsageError(`unknown command ${JSON.stringify(verb)} (see --help)`);
  }
}

export function agentRef(o: AgentOptions): AgentRef {
  return { dir: o.agent, ...(o.files ? { files: o.files } : {}), ...(o.home ? { home: o.home } : {}) };
}
