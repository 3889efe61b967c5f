// --agents FILE: one process for several agents of one owner (spec: contract.txt "shared"). Each is
// served on its own port, as that agent: its own folders, its own tools and key from its `env`, its
// own sessions, turns and tool host. stdio serves them all, each request routed by the agent its
// `_meta.link.agent` names. Nothing of one agent's is reachable from another's connection.
import { readFileSync, realpathSync, statSync } from "node:fs";
import { basename, dirname, isAbsolute, join, relative, resolve } from "node:path";
import { SharedAgents, describeIssues, type SharedAgents as SharedAgentsT } from "../protocol/index.js";
import type { AgentRef } from "../store/paths.js";
import { checkAgent } from "./check.js";
import { UsageError } from "./cli.js";
import { PENDING_MAX } from "./front.js";
import { route } from "./route.js";
import type { Process, Served } from "./serve.js";

/** The largest agents file read: thousands of agents fit. */
export const AGENTS_FILE_MAX = 16 * 1024 * 1024;
/** The most agents one process serves. */
export const AGENTS_MAX = 10_000;

/** Whether `inner` is `outer` or a folder inside it. */
function within(inner: string, outer: string): boolean {
  const r = relative(outer, inner);
  return r === "" || (!r.startsWith("..") && !isAbsolute(r));
}

/**
 * Where a path leads, its links followed: the real path of its deepest part that exists, and the
 * rest as named. Two names of one folder (one through a link) lead to one place.
 */
function leadsTo(path: string): string {
  try {
    return realpathSync.native(path);
  } catch {
    const up = dirname(path);
    return up === path ? path : join(leadsTo(up), basename(path));
  }
}

/** Reads and checks a SharedAgents file: any fault is one line, and nothing is served. */
export function readAgentsFile(file: string): SharedAgentsT {
  let text: string;
  try {
    const st = statSync(file);
    if (!st.isFile()) throw new UsageError(`--agents ${file}: not a file`);
    if (st.size > AGENTS_FILE_MAX) throw new UsageError(`--agents ${file}: ${st.size} bytes, over the limit of ${AGENTS_FILE_MAX}`);
    text = readFileSync(file, "utf8");
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError(`--agents ${file}: cannot be read: ${(e as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new UsageError(`--agents ${file}: not JSON`);
  }
  const parsed = SharedAgents.safeParse(json);
  if (!parsed.success) throw new UsageError(`--agents ${file}: not a SharedAgents list: ${describeIssues(parsed.error)}`);
  return checkAgents(file, parsed.data);
}

/** What must hold across the agents: at least one, all of one owner, each name, id, folder and port its own. */
export function checkAgents(file: string, agents: SharedAgentsT): SharedAgentsT {
  const say = (why: string) => new UsageError(`--agents ${file}: ${why}`);
  if (agents.length === 0) throw say("names no agent");
  if (agents.length > AGENTS_MAX) throw say(`names ${agents.length} agents, over the limit of ${AGENTS_MAX}`);
  const names = new Map<string, number>();
  const ports = new Map<number, number>();
  const folders: { path: string; at: number; what: string }[] = [];
  // One process serves several agents of one owner (the contract's shared): another owner's agent
  // would share its memory, its log and its crashes.
  const owner = (agents[0] as (typeof agents)[number]).owner;
  agents.forEach((a, at) => {
    if (a.owner !== owner) throw say(`agents 0 and ${at} are of two owners (${JSON.stringify(owner.slice(0, 120))} and ${JSON.stringify(a.owner.slice(0, 120))}): one process serves the agents of one owner`);
    for (const n of new Set([a.name, a.id])) {
      const before = names.get(n);
      if (before !== undefined) throw say(`agents ${before} and ${at} are both called ${JSON.stringify(n)}: a request names its agent by name or id`);
      names.set(n, at);
    }
    if (a.port !== 0) {
      const before = ports.get(a.port);
      if (before !== undefined) throw say(`agents ${before} and ${at} are both on port ${a.port}`);
      ports.set(a.port, at);
    }
    for (const [what, path] of [["home", a.home], ["files", a.files], ["agent", a.agent]] as const) {
      if (path === undefined) continue;
      if (!isAbsolute(path)) throw say(`agent ${at} (${a.name}): ${what} ${JSON.stringify(path.slice(0, 120))} is not an absolute path`);
    }
    const own = leadsTo(resolve(a.agent ?? a.files));
    folders.push({ path: own, at, what: "own folder" });
    const files = leadsTo(resolve(a.files));
    if (a.agent !== undefined && files !== own) folders.push({ path: files, at, what: "files folder" });
  });
  // One folder named twice (or one inside another's, or one through a link) would let one agent's
  // conversations or tools reach another's. In the order of their paths part by part, a folder inside
  // another comes after it, with only folders inside it between: each is checked against those it may be in.
  const key = (path: string) => path.replaceAll("/", "\u0000");
  const outer: { path: string; at: number; what: string }[] = [];
  for (const f of folders.slice().sort((x, y) => (key(x.path) < key(y.path) ? -1 : key(x.path) > key(y.path) ? 1 : x.at - y.at))) {
    while (outer.length > 0 && !within(f.path, (outer.at(-1) as (typeof outer)[number]).path)) outer.pop();
    const g = outer.find((o) => o.at !== f.at);
    if (g !== undefined) {
      const [first, second] = g.at < f.at ? [g, f] : [f, g];
      throw say(`agents ${first.at} and ${second.at} share a folder: ${first.what} ${first.path} and ${second.what} ${second.path}; each agent's folders are its own`);
    }
    outer.push(f);
  }
  for (const a of agents) checkAgent(resolve(a.agent ?? a.files));
  return agents;
}

export function agentRefOf(a: SharedAgentsT[number]): AgentRef {
  return { dir: resolve(a.agent ?? a.files), files: resolve(a.files), home: resolve(a.home) };
}

export async function serveShared(p: Process, file: string): Promise<void> {
  const agents = readAgentsFile(file);
  const served: { a: SharedAgentsT[number]; s: Served }[] = agents.map((a) => ({
    a,
    // Its own environment alone: the one it would have had served alone, never another's or the process's tools.
    s: p.add({ agent: agentRefOf(a), env: { ...a.env }, names: [a.name, a.id], logAs: a.name }),
  }));
  try {
    for (const { a, s } of served) {
      try {
        await p.servePort(a.port, p.oneAgent(s), { agent: a.name }, "give it another port in the --agents file");
      } catch (e) {
        throw Object.assign(new Error(`agent ${a.name}: ${(e as Error).message}`), { exitCode: (e as { exitCode?: number }).exitCode ?? 1 });
      }
    }
  } catch (e) {
    p.abandon();
    throw e;
  }
  p.serveStdio(
    (input, output) =>
      route(
        served.map(({ a, s }) => ({ names: [a.name, a.id], connect: async (i, o) => (await s.loadFor()).connect(i, o) })),
        input,
        output,
      ),
    { agents: agents.length },
    false,
    // Each agent holds at most PENDING_MAX unanswered (the route refuses past it), so the connection
    // holds at most that many of each: its own bound, one agent's alone, would let one agent's stalled
    // requests keep stdin unread and every other agent's waiting.
    PENDING_MAX * agents.length,
  );
}
