// Pre-filled conversations, kept under the system's temp folder between runs: writing 100,000 event
// files and taking the first turn over them (which reads every one, as there is no mark yet) is slow,
// and a run only ever adds events after the prepared ones, so it is cheap to put back.
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import type { Event } from "../../protocol/index.js";
import { paths, type AgentRef, type ConversationPaths } from "../../store/index.js";
import { prefillEvent } from "./agent.js";

/** Changes whenever what a fixture holds changes, so an old one is made again rather than reused. */
export const FIXTURE_VERSION = "4";
const PREFIX = "lnk-link-harness-bench-";
export const THREAD = "bench";
/** When the pre-filled conversation began: long before any run, as an old conversation would. */
const START = Date.parse("2026-01-01T00:00:00Z");

const Ready = z.object({ version: z.string(), size: z.number(), budget: z.number(), last: z.number(), key: z.string() });
type Ready = z.infer<typeof Ready>;

export interface Fixture {
  readonly agent: AgentRef;
  readonly conv: ConversationPaths;
  /** Events written before the first turn. */
  readonly size: number;
  /** The conversation's budget, in tokens, that its mark was made for. */
  readonly budget: number;
  /** Whether it was made in this run (rather than reused). */
  readonly made: boolean;
}

export function fixtureRoot(): string {
  return join(tmpdir(), `${PREFIX}${FIXTURE_VERSION}`);
}

/** Removes fixtures of other versions. */
function removeOldVersions(): void {
  for (const name of readdirSync(tmpdir())) {
    if (name.startsWith(PREFIX) && name !== `${PREFIX}${FIXTURE_VERSION}`) rmSync(join(tmpdir(), name), { recursive: true, force: true });
  }
}

export function prefillEvents(size: number): Event[] {
  const events: Event[] = [];
  for (let n = 1; n <= size; n++) events.push(prefillEvent(n, START));
  return events;
}

export interface FixtureBuild {
  /** The budget to make the mark for, given the pre-filled events. */
  budget(events: readonly Event[]): number;
  /** Takes the first turn (which writes the mark and the transcript) with that budget. */
  firstTurn(agent: AgentRef, thread: string, budget: number): Promise<void>;
  /** What the budget's choice depends on besides the size: a different key makes the fixture again. */
  key: string;
}

/**
 * A conversation of `size` events after one turn, as the last run left it or made now: the
 * events a run adds are removed, the mark and the transcript put back as they were.
 */
export async function conversationFixture(size: number, build: FixtureBuild): Promise<Fixture> {
  // One for each size and key: the two windows a run measures at the same size would otherwise make
  // it again in turn at every run (110,000 files written and removed twice, and the file system then
  // slower to make files for minutes: see lnk-link-harness-bench(7), making files).
  const home = join(fixtureRoot(), `size-${size}-${build.key}`);
  const agent: AgentRef = { dir: join(home, "agent") };
  const conv = paths(agent).conversation(THREAD);
  const readyFile = join(home, "ready.json");
  let ready: Ready | undefined;
  try {
    const parsed = Ready.safeParse(JSON.parse(readFileSync(readyFile, "utf8")));
    if (parsed.success && parsed.data.version === FIXTURE_VERSION && parsed.data.size === size && parsed.data.key === build.key) ready = parsed.data;
  } catch {
    ready = undefined;
  }
  if (ready) {
    for (let n = ready.last + 1; existsSync(conv.event(n)); n++) unlinkSync(conv.event(n));
    rmSync(conv.lock, { recursive: true, force: true });
    // Its window's events file is the last run's, which held the events removed above: the run's
    // first turn makes it again, as it did when the fixture was made.
    rmSync(conv.windowEvents, { force: true });
    copyFileSync(join(home, "window.json"), conv.window);
    copyFileSync(join(home, "transcript.md"), conv.transcript);
    return { agent, conv, size, budget: ready.budget, made: false };
  }

  removeOldVersions();
  rmSync(home, { recursive: true, force: true });
  mkdirSync(conv.dir, { recursive: true });
  const events = prefillEvents(size);
  // Written directly, as earlier processes would have; no fsync, the bench measures reading them.
  events.forEach((event, i) => writeFileSync(conv.event(i + 1), `${JSON.stringify(event)}\n`));
  const budget = build.budget(events);
  await build.firstTurn(agent, THREAD, budget);
  let last = size;
  while (existsSync(conv.event(last + 1))) last++;
  copyFileSync(conv.window, join(home, "window.json"));
  copyFileSync(conv.transcript, join(home, "transcript.md"));
  writeFileSync(readyFile, `${JSON.stringify({ version: FIXTURE_VERSION, size, budget, last, key: build.key } satisfies Ready)}\n`);
  return { agent, conv, size, budget, made: true };
}
