// The one function that names every path of an agent (DESIGN.md "The agent's folders").
import { join, sep } from "node:path";
import { Thread } from "../protocol/index.js";

/** An agent as the store knows it: its own folder, its files folder (the workspace) and its Home. */
export interface AgentRef {
  /** The agent's own folder: settings, instructions, skills, notes, chats. */
  readonly dir: string;
  /** The agent's files folder, where its tools work; left out, everything is in `dir`. */
  readonly files?: string;
  /** The agent's Home. */
  readonly home?: string;
}

export interface ConversationPaths {
  readonly thread: string;
  readonly dir: string;
  readonly transcript: string;
  readonly window: string;
  /** Derived: the window's events, a line each (window.jsonl), read at once by a process new to the conversation. */
  readonly windowEvents: string;
  /** Derived: how far `usage` counted, and its count there. */
  readonly usage: string;
  readonly tools: string;
  readonly lock: string;
  event(n: number): string;
}

export interface AgentPaths {
  readonly dir: string;
  readonly files: string;
  readonly home: string;
  readonly config: string;
  readonly instructions: string;
  readonly instruction: string;
  readonly skills: string;
  /** The skills Link copies into the harness's home for the identity: <home>/.lnk/agent/skills. */
  readonly identitySkills: string;
  readonly memory: string;
  readonly notes: string;
  readonly chats: string;
  skill(name: string): string;
  conversation(thread: string): ConversationPaths;
}

export const EVENT_DIGITS = 12;
const EVENT_NAME = /^\d{12}\.json$/;

export function eventName(n: number): string {
  return `${String(n).padStart(EVENT_DIGITS, "0")}.json`;
}

/** The number of an event file's name, or undefined for any other file. */
export function eventNumber(name: string): number | undefined {
  return EVENT_NAME.test(name) ? Number(name.slice(0, EVENT_DIGITS)) : undefined;
}

export class InvalidNameError extends Error {
  constructor(kind: string, name: string, why: string) {
    super(`invalid ${kind} ${JSON.stringify(name.slice(0, 80))}: ${why}`);
    this.name = "InvalidNameError";
  }
}

/** Names found to be valid threads: a name is checked once, not at each of the five uses a turn makes of it. */
const validThreads = new Set<string>();
/** Past this many, the oldest half is let go. */
const VALID_THREADS_MAX = 4096;

/** Whether `thread` is a valid thread name (Thread), remembered once it is. */
export function isThread(thread: string): boolean {
  if (validThreads.has(thread)) return true;
  if (!Thread.safeParse(thread).success) return false;
  if (validThreads.size >= VALID_THREADS_MAX) {
    let drop = VALID_THREADS_MAX / 2;
    for (const old of validThreads) {
      if (drop-- <= 0) break;
      validThreads.delete(old);
    }
  }
  validThreads.add(thread);
  return true;
}

/** Checks a thread (or skill) name before it becomes a path. */
export function checkThread(thread: string, kind = "thread name"): string {
  if (isThread(thread)) return thread;
  const parsed = Thread.safeParse(thread);
  throw new InvalidNameError(kind, thread, parsed.error?.issues[0]?.message ?? "invalid");
}

/**
 * The paths of each agent asked for lately, by its folders: a turn asks for them some twenty times,
 * each some ten joins. Each conversation's paths are still made anew at each ask, so a write made
 * outside a turn's lock never names the folder that lock holds (store/folder.ts).
 */
const agentPaths = new Map<string, AgentPaths>();
/** Past this many agents, the paths are made again as they are asked for. */
const AGENT_PATHS_MAX = 1024;

export function paths(agent: AgentRef): AgentPaths {
  const key = JSON.stringify([agent.dir, agent.files, agent.home]);
  const known = agentPaths.get(key);
  if (known) return known;
  if (agentPaths.size >= AGENT_PATHS_MAX) agentPaths.clear();
  const made = agentPathsOf(agent);
  agentPaths.set(key, made);
  return made;
}

function agentPathsOf(agent: AgentRef): AgentPaths {
  const dir = agent.dir;
  const chats = join(dir, "chats");
  const home = agent.home ?? agent.files ?? dir;
  return {
    dir,
    files: agent.files ?? dir,
    home,
    identitySkills: join(home, ".lnk", "agent", "skills"),
    config: join(dir, "config.json"),
    instructions: join(dir, "instructions"),
    instruction: join(dir, "instructions", "instruction.md"),
    skills: join(dir, "skills"),
    memory: join(dir, "memory"),
    notes: join(dir, "memory", "notes.md"),
    chats,
    skill: (name) => join(dir, "skills", checkThread(name, "skill name"), "SKILL.md"),
    conversation: (thread) => conversationIn(chats, checkThread(thread)),
  };
}

/**
 * The paths of a conversation's folder `name` in `chats`, a name the caller vouches for: a thread
 * (AgentPaths.conversation checks it), or a folder of the store's own that no thread can name (a
 * leading dot), such as an import's while it is written.
 */
export function conversationIn(chats: string, name: string): ConversationPaths {
  // Joined by hand: chats is normalised (made by join), and a name of one part (no separator, not
  // `.` or `..`, as every thread is) and the files' names join to what join makes; a turn asks for a
  // conversation's paths some six times, each seven joins, and its events' for thousands.
  const cdir = onePart(name) ? `${chats}${sep}${name}` : join(chats, name);
  return {
    thread: name,
    dir: cdir,
    transcript: `${cdir}${sep}transcript.md`,
    window: `${cdir}${sep}window.json`,
    windowEvents: `${cdir}${sep}window.jsonl`,
    usage: `${cdir}${sep}usage.json`,
    tools: `${cdir}${sep}tools.json`,
    lock: `${cdir}${sep}.lock`,
    event: (n) => `${cdir}${sep}${eventName(n)}`,
  };
}

/** Whether a name is one part of a path as it is: not empty, no separator, not `.` or `..`. */
function onePart(name: string): boolean {
  return name !== "" && name !== "." && name !== ".." && !name.includes("/") && !name.includes(sep);
}
