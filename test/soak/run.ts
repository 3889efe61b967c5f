// `npm run soak [-- --kills N] [-- --minutes M] [-- --conversations C] [-- --seed S] [-- --dir DIR]`:
// several conversations take turns with tool calls against the daemon on its socket while it is
// killed with SIGKILL at random moments and started again, N times (at most M minutes); then every
// conversation takes one more turn on a daemon left alive, and the disk is checked. Prints a summary
// and exits 1 on any violation (man lnk-link-harness-soak(7)).
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, truncateSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { z } from "zod";
import { forgetEvents, paths, readEventsFrom } from "../../store/index.js";
import { configure, scriptedSettings } from "../acp-client.js";
import { startModelServer } from "../model-server.js";
import { checkAcks, checkCalls, checkTranscript, checkWindowFile, readConversation } from "./check.js";
import { checkRecovery } from "./recovery.js";
import { linkFreeEnv } from "../fixtures/env.js";
import { Generation, Supervisor } from "./daemon.js";
import { answerText, SoakModel } from "./model.js";
import { Rng } from "./rng.js";
import { startTool, TOOL_KINDS, type Tool } from "./tool.js";
import { awaitTrigger, Bus, TRIGGER_NAMES, type Trigger } from "./triggers.js";
import { ClientLog, Worker } from "./worker.js";

const Options = z.object({
  kills: z.coerce.number().int().nonnegative(),
  minutes: z.coerce.number().positive(),
  conversations: z.coerce.number().int().min(1).max(32),
  seed: z.coerce.number().int().nonnegative(),
  tool: z.enum(TOOL_KINDS),
  dir: z.string().optional(),
});
type Options = z.infer<typeof Options>;

/** How long a trigger may wait for what it waits to see before the kill comes anyway. */
const PATIENCE_MS = 8_000;
const SERVING_MS = 30_000;

interface Summary {
  seed: number;
  tool: string;
  conversations: number;
  kills: number;
  killsAsked: number;
  byMoment: Partial<Record<Trigger | "patience", number>>;
  seconds: number;
  prompts: number;
  acknowledged: number;
  /** Answers `_link/recover` handed over at the end: what the kills left owed. */
  recovered: number;
  /**
   * Of those, answers their prompts' responses had delivered, by a daemon killed within
   * DELIVERED_WINDOW_MS of it: the one window acp(7) tells of (killed after writing an answer, before
   * removing its owed file), not a violation.
   */
  again: number;
  refused: number;
  events: number;
  calls: number;
  answered: number;
  unanswered: number;
  temps: number;
  holders: number;
  /** FIFOs planted where a derived file was, between kills. */
  fifos: number;
  violations: string[];
}

/** What the agent remembers, in a notes.md made 1.5 GB sparse: read only as far as its section holds. */
const NOTES = "The soak's agent remembers: answer briefly.\n";

/** Plants a FIFO where a conversation's derived file (window.json, window.jsonl or transcript.md) is: made again at its next turn. */
function plantFifo(dir: string, rng: Rng): boolean {
  const path = join(dir, rng.pick(["window.json", "window.jsonl", "transcript.md"]));
  if (!existsSync(dir)) return false;
  try {
    unlinkSync(path);
  } catch {
    // none yet
  }
  return spawnSync("mkfifo", [path]).status === 0;
}

/**
 * A copy of the conversations made with hard links (cp -al): every event has two names, and the store
 * reads each conversation of the copy as the original.
 */
function checkHardLinkedCopy(agent: string, into: string, threads: string[], violations: string[]): void {
  if (spawnSync("cp", ["-al", join(agent, "chats"), join(into, "chats")]).status !== 0) {
    violations.push("cp -al of the conversations failed");
    return;
  }
  forgetEvents();
  for (const thread of threads) {
    try {
      const original = readEventsFrom(paths({ dir: agent }).conversation(thread), 1);
      forgetEvents();
      const copy = readEventsFrom(paths({ dir: into }).conversation(thread), 1);
      if (JSON.stringify(copy) !== JSON.stringify(original)) violations.push(`${thread}: its hard-linked copy reads otherwise than the original`);
    } catch (e) {
      violations.push(`${thread}: its hard-linked copy can't be read: ${(e as Error).message}`);
    }
  }
}

function options(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      kills: { type: "string", default: "200" },
      minutes: { type: "string", default: "20" },
      conversations: { type: "string", default: "4" },
      seed: { type: "string", default: String(Math.floor(Math.random() * 2 ** 31)) },
      tool: { type: "string", default: "both" },
      dir: { type: "string" },
    },
  });
  const parsed = Options.safeParse(values);
  if (!parsed.success) throw new Error(`bad arguments: ${parsed.error.issues.map((i) => `--${i.path.join(".")}: ${i.message}`).join("; ")}`);
  return parsed.data;
}

const late = Symbol("late");

/** The promise's value, or `late` if it takes longer than `ms`. */
async function within<T>(p: Promise<T>, ms: number): Promise<T | typeof late> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<typeof late>((resolve) => (timer = setTimeout(() => resolve(late), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

const say = (line: string) => process.stdout.write(`soak: ${line}\n`);

/** What is running now, ended at once if the runner is stopped. */
let current: Generation | undefined;
let tool: Tool | undefined;

async function soak(o: Options & { dir: string }): Promise<Summary> {
  const began = Date.now();
  const deadline = began + o.minutes * 60_000;
  // Time kept at the end for the last turns and the checks.
  const reserve = Math.min(60_000, Math.max(15_000, (deadline - began) / 4));
  const rng = new Rng(o.seed);
  const bus = new Bus();
  const server = await startModelServer();
  const model = new SoakModel(rng, server.requests, { request: (ms) => bus.emit("request", ms) });
  server.fallback = model.reply;
  const record = new ClientLog();
  const violations: string[] = [];
  const byMoment: Summary["byMoment"] = {};
  let kills = 0;
  let fifos = 0;
  let recovered: number;
  let again: number;
  /** When each daemon was killed (performance.now()). */
  const killedAt: number[] = [];
  try {
    mkdirSync(o.dir, { recursive: true });
    const agent = join(o.dir, "agent");
    const socket = join(o.dir, "control.sock");
    // A small window, so the window's mark moves (and is rebuilt after kills) as conversations grow.
    // The notes' section held small, so the sparse notes.md below leaves the window to the conversation.
    configure(agent, scriptedSettings(server.url, { window: { max: 6_000 }, instructions: { notes: { max: 200 } } }));
    mkdirSync(join(agent, "memory"), { recursive: true });
    writeFileSync(join(agent, "memory", "notes.md"), NOTES);
    truncateSync(join(agent, "memory", "notes.md"), 1.5 * 1024 ** 3);
    const args = ["--agent", agent, "--socket", socket];
    tool = await startTool(o.tool);
    const env = () => linkFreeEnv({ LNK_TOOL_EVERYTHING: rng.pick(tool?.sources ?? []) });

    const sup = new Supervisor();
    const threads = Array.from({ length: o.conversations }, (_, i) => `soak-${i + 1}`);
    const workers = Promise.all(threads.map((t) => new Worker(t, socket, agent, sup, bus, record).run()));

    let id = 0;
    while (kills < o.kills && Date.now() < deadline - reserve) {
      const gen = (current = new Generation(++id, args, env(), false));
      try {
        await gen.serving(SERVING_MS);
      } catch (e) {
        violations.push(`a daemon did not serve after ${kills} kills: ${(e as Error).message.slice(0, 2000)}`);
        await gen.kill();
        break;
      }
      sup.publish(gen);
      const trigger = rng.pick(TRIGGER_NAMES);
      const moment = (await awaitTrigger(trigger, bus, rng, PATIENCE_MS)) ? trigger : "patience";
      killedAt.push(performance.now());
      await gen.kill("SIGKILL");
      kills++;
      // With no daemon up, a derived file of a conversation becomes a FIFO: the next turn makes it again.
      if (rng.int(3) === 0 && plantFifo(join(agent, "chats", rng.pick(threads)), rng)) fifos++;
      byMoment[moment] = (byMoment[moment] ?? 0) + 1;
      if (kills % 10 === 0) say(`${kills} kills, ${record.acks.length} turns acknowledged`);
    }

    const last = (current = new Generation(++id, args, env(), true));
    try {
      await last.serving(SERVING_MS);
      sup.publish(last);
      if ((await within(workers, Math.max(10_000, deadline - Date.now()))) === late) {
        violations.push("the last turns, on a daemon not killed, were not all answered in time");
      }
    } catch (e) {
      violations.push(`the last daemon did not serve: ${(e as Error).message.slice(0, 2000)}`);
    }
    sup.finish();
    // Every prompt was answered at last: what the kills left owed is handed over, once, and nothing is left.
    ({ recovered, again } = await checkRecovery(agent, socket, threads, violations, new Map(record.acks.map((a) => [answerText(a.thread, a.k), a.at])), killedAt));
    const stopped = await within(last.kill("SIGTERM"), 20_000);
    if (stopped === late || stopped.code !== 0) violations.push(`the last daemon did not stop cleanly on SIGTERM: ${stopped === late ? "still running" : JSON.stringify(stopped)}`);
    await last.kill("SIGKILL");
    await workers;
    current = undefined;

    violations.push(...record.violations, ...record.errors.map((e) => `a prompt was answered with an error: ${e}`));
    const totals = { events: 0, calls: 0, answered: 0, unanswered: 0, temps: 0, holders: 0 };
    const left: string[] = [];
    for (const thread of threads) {
      const dir = join(agent, "chats", thread);
      const conv = readConversation(dir, thread, violations);
      const calls = checkCalls(conv, server.requests, model.madeIn, violations);
      checkAcks(conv, record.acks, violations);
      checkTranscript(dir, conv, violations);
      checkWindowFile(dir, conv, violations);
      totals.events += conv.events.length;
      totals.temps += conv.temps;
      totals.holders += conv.holders;
      left.push(...conv.holdersLeft);
      totals.calls += calls.calls;
      totals.answered += calls.answered;
      totals.unanswered += calls.unanswered;
    }
    if (record.acks.length === 0) violations.push("no turn was acknowledged: the soak tested nothing");
    // A killed daemon's holder is removed by the next that locks its conversation; the last removed its own as it stopped.
    if (totals.holders > 0) violations.push(`${totals.holders} lock holders left in the conversations' folders: ${left.join("; ")}`);
    const copy = join(o.dir, "hard-linked");
    mkdirSync(copy, { recursive: true });
    checkHardLinkedCopy(agent, copy, threads, violations);
    if (!server.requests.some((r) => JSON.stringify(r.body.messages?.[0] ?? "").includes("answer briefly"))) {
      violations.push("the notes in the sparse notes.md never reached the model");
    }
    return {
      seed: o.seed,
      tool: o.tool,
      conversations: o.conversations,
      kills,
      killsAsked: o.kills,
      byMoment,
      seconds: Math.round((Date.now() - began) / 1000),
      prompts: [...record.sent.values()].reduce((s, l) => s + l.length, 0),
      acknowledged: record.acks.length,
      recovered,
      again,
      refused: record.errors.length,
      ...totals,
      fifos,
      violations,
    };
  } finally {
    await current?.kill("SIGKILL");
    await tool?.stop();
    await server.close();
  }
}

function print(s: Summary): void {
  const moments = Object.entries(s.byMoment).map(([k, v]) => `${k} ${v}`).join(", ");
  say(`seed ${s.seed}, ${s.conversations} conversations, tool over ${s.tool}, ${s.kills} kills${s.kills < s.killsAsked ? ` of ${s.killsAsked} asked (stopped by the time limit)` : ""} in ${s.seconds} s`);
  say(`kills by moment: ${moments || "none"}`);
  say(`${s.prompts} prompts sent, ${s.acknowledged} turns acknowledged, ${s.refused} answered with an error, ${s.recovered} answers recovered at the end (${s.again} of them delivered already by a daemon killed as it delivered them)`);
  say(`${s.events} events; ${s.calls} tool calls: ${s.answered} answered, ${s.unanswered} answered as unanswered at the next turn; ${s.temps} temp files and ${s.holders} lock holders left by kills`);
  say(`notes.md 1.5 GB sparse; ${s.fifos} FIFOs planted where a derived file was; a hard-linked copy of the conversations read back`);
  for (const v of s.violations.slice(0, 40)) say(`violation: ${v}`);
  if (s.violations.length > 40) say(`… and ${s.violations.length - 40} more`);
  say(`violations ${s.violations.length}`);
  process.stdout.write(`${JSON.stringify({ soak: { ...s, violations: s.violations.length } })}\n`);
}

async function main(): Promise<number> {
  const o = options(process.argv.slice(2));
  const own = o.dir === undefined;
  const dir = o.dir ?? mkdtempSync(join(tmpdir(), "lnk-soak-"));
  const onSignal = () => {
    current?.child.kill("SIGKILL");
    tool?.kill();
    if (own) rmSync(dir, { recursive: true, force: true });
    process.exit(130);
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  const summary = await soak({ ...o, dir });
  print(summary);
  if (own && summary.violations.length === 0) rmSync(dir, { recursive: true, force: true });
  else if (own) say(`the agent's folder is kept for a look: ${dir}`);
  return summary.violations.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`soak: ${e instanceof Error ? e.message : String(e)}\n`);
    current?.child.kill("SIGKILL");
    tool?.kill();
    process.exit(2);
  },
);
