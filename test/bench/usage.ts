// `lnk-link-harness usage` over a long conversation: the command run whole (a process started, every
// event's head read, each answer read and checked), and the same figures counted in this process.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { AgentUsage, type Event } from "../../protocol/index.js";
import { paths } from "../../store/index.js";
import { conversationUsage } from "../../turn/usage.js";
import { MAIN } from "../fixtures/built.js";
import { fixtureRoot, prefillEvents, THREAD } from "./fixture.js";
import { summarize, type Summary } from "./stats.js";

export interface UsageResult {
  /** Events in the conversation. */
  events: number;
  /** Answer events among them. */
  answers: number;
  /** The command, spawn to exit, counting from the first event (no usage.json) (ms). */
  command: Summary;
  /** The same, going on from the usage.json the count before it kept, with nothing written since (ms). */
  commandKept: Summary;
  /** conversationUsage() in this process, every file read from disk each time (ms). */
  inProcess: Summary;
  /** node -e 0 on the same machine, for what of the command's time is Node starting (ms). */
  nodeStart: number;
}

const Ready = z.object({ size: z.number() });

/** Every other answer reports a cost, and the fingerprints change now and then, as sections are edited. */
function withPrints(events: Event[]): Event[] {
  return events.map((e, i) => {
    if (e.kind !== "message" || e.role !== "assistant") return e;
    const edit = Math.floor(i / 5_000).toString(16).padStart(12, "0");
    return { ...e, ...(i % 4 === 1 ? { cost: 0.0001 } : {}), prompt: { sections: { base: "0123456789ab", standing: edit }, window: "ba9876543210" } };
  });
}

/** A conversation of `size` events kept between runs (its usage.json removed before each count from the first event) under the bench's fixtures. */
function usageFixture(size: number): string {
  const home = join(fixtureRoot(), `usage-${size}`);
  const ready = join(home, "ready.json");
  try {
    if (Ready.parse(JSON.parse(readFileSync(ready, "utf8"))).size === size) return join(home, "agent");
  } catch {
    // Made again below.
  }
  rmSync(home, { recursive: true, force: true });
  const conv = paths({ dir: join(home, "agent") }).conversation(THREAD);
  mkdirSync(conv.dir, { recursive: true });
  withPrints(prefillEvents(size)).forEach((event, i) => writeFileSync(conv.event(i + 1), `${JSON.stringify(event)}\n`));
  writeFileSync(ready, `${JSON.stringify({ size })}\n`);
  return join(home, "agent");
}

export function measureUsage(size: number, runs: number, nodeStart: number, log: (line: string) => void): UsageResult {
  log(`usage: a conversation of ${size.toLocaleString("en-US")} events${existsSync(join(fixtureRoot(), `usage-${size}`, "ready.json")) ? "" : " (writing it)"}`);
  const agent = usageFixture(size);
  const conv = paths({ dir: agent }).conversation(THREAD);
  const command: number[] = [];
  const commandKept: number[] = [];
  let answers = 0;
  for (let i = 0; i < runs * 2; i++) {
    const whole = i % 2 === 0;
    if (whole) rmSync(conv.usage, { force: true });
    const t0 = performance.now();
    const r = spawnSync(process.execPath, [MAIN, "usage", "--agent", agent, THREAD, "--json"], { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
    (whole ? command : commandKept).push(performance.now() - t0);
    if (r.status !== 0) throw new Error(`usage failed: ${r.stderr}`);
    answers = AgentUsage.parse(JSON.parse(r.stdout)).total.requests;
  }
  const inProcess: number[] = [];
  for (let i = 0; i < runs; i++) {
    rmSync(conv.usage, { force: true });
    const t0 = performance.now();
    conversationUsage(conv);
    inProcess.push(performance.now() - t0);
  }
  return { events: size, answers, command: summarize(command), commandKept: summarize(commandKept), inProcess: summarize(inProcess), nodeStart };
}
