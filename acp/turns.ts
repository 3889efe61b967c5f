// The turns this process runs: one at a time per conversation. A prompt that arrives while its
// conversation's turn runs steers that turn (spec: "A message that steers a running turn is answered"),
// and its answer is that turn's.
import type { SessionUpdate } from "@agentclientprotocol/sdk";
import { EVENT_KINDS, type Event, type Verbosity } from "../protocol/index.js";
import type { ConversationPaths } from "../store/index.js";
import type { IncomingMessage, SteerQueue, TurnEvent, TurnListener, TurnOutcome } from "../turn/types.js";
import type { CallNames } from "./call-names.js";
import { askedUpdates } from "./replay.js";
import { textUpdate, TurnUpdates } from "./updates.js";

/** Where a turn's updates go: one connection's view of the session. */
export interface Subscriber {
  /**
   * `heldFor`: an update the connection is shown with some of the loads of it that follow the turn
   * and not with others: held back while they run (Outbox.hold), it is shown as they end (shownAfter).
   */
  send(update: SessionUpdate, heldFor?: HeldFor): void;
}

/** A load that follows a turn: whether it failed (its following stopped). */
export interface Load {
  readonly failed: boolean;
}

/**
 * Whether an update is shown once `load` is over: as the connection's view with that load has it
 * (`kept`), or, should it fail, as the view without it (`failed`): each whether it is shown, or
 * as the load before it ends.
 */
export interface HeldFor {
  load: Load;
  kept: boolean | HeldFor;
  failed: boolean | HeldFor;
}

/** Whether an update is shown, as the loads it was held for stand (one under way, as if it will not fail; none: shown). */
export function shownAfter(heldFor: HeldFor | undefined): boolean {
  let at: boolean | HeldFor = heldFor ?? true;
  while (typeof at === "object") at = at.load.failed ? at.failed : at.kept;
  return at;
}

/** Starts one turn of the conversation. */
export type StartTurn = (message: IncomingMessage, steering: SteerQueue, signal: AbortSignal, listener: TurnListener) => Promise<TurnOutcome>;

export class StoppingError extends Error {
  constructor() {
    super("the daemon is stopping and takes no new turns");
    this.name = "StoppingError";
  }
}

/** A turn that ended with a failure: its outcome, and why in words a person can act on. */
export class TurnFailed extends Error {
  constructor(readonly outcome: TurnOutcome | undefined, message: string) {
    super(message);
    this.name = "TurnFailed";
  }
}

/** What a message's answer is owed by: told where the turn that answers it wrote the message (`_link/recover`). */
export interface Owing {
  /**
   * The turn that answers the message writes it, or another it answers too, after event `after`, at
   * `time` (the message's); `through`, the paths its lock holds the conversation's folder by.
   */
  mark(after: number, through: ConversationPaths, time?: string): void;
}

/** The names the conversation's calls were shown by up to event `after`, which a turn's go on from. */
export type CallNamesBefore = (after: number) => Promise<CallNames>;

interface Waiting {
  message: IncomingMessage;
  owing: Owing | undefined;
  names: CallNamesBefore | undefined;
  verbosity: Verbosity;
  /** How its own session starts a turn: one that arrived too late to steer runs as its own. */
  start: StartTurn;
  /** Who sent it, and when (Turns' clock): a follower is not shown again a message it sent after its load. */
  from: Subscriber;
  at: number;
  resolve(outcome: TurnOutcome): void;
  reject(error: unknown): void;
}

/**
 * The key of a conversation's turns: its chat's folder, and the conversation of the chat a session
 * names (`<thread>~<name>`), left out for the chat's current one. A prompt steers only a turn of the
 * same key; turns of two keys of one chat run one after the other, as its lock has them.
 */
export function turnKey(dir: string, conversation?: string): string {
  return conversation === undefined ? dir : `${dir}${KEY_SEPARATOR}${conversation}`;
}

/** Between a chat's folder and a conversation's name in a key: no path holds it (a chat's name may hold `~`). */
const KEY_SEPARATOR = "\u0000";

interface Running {
  /** Aborted by a cancel; a new one for the turn that answers what came after it. */
  controller: AbortController;
  /** Messages that arrived while it ran and the turn hasn't taken yet. */
  readonly queue: Waiting[];
  /** Messages that arrived after it was cancelled, while it ended: a turn of their own, after it. */
  readonly after: Waiting[];
  readonly subscribers: Set<Subscriber>;
  done?: Promise<void>;
  /** Its turn holds the chat's lock and writes: it said where it writes its message. */
  writing: boolean;
  /** The chat's conversation its turn writes, once it said (each turn says again: the chat's current one may change between them). */
  writes?: string;
  /** What its turn has shown so far, for a load that follows it (Turns.follow). */
  shown: Shown;
  /** The subscribers that sent it a message: each is answered by it. */
  readonly senders: Set<Subscriber>;
  /** The subscribers that follow it from a load: the loads each follows it by, the latest (where it stood) first. */
  readonly through: Map<Subscriber, Through>;
  /** The text its followers that sent it a message were not shown as it came, its message not shown yet (shown once the turn is over, should its message never be). */
  readonly withheld: Map<Subscriber, string>;
  /** The messages the turn running now answers (Turns.abandon). */
  answering?: Waiting[];
}

/** A load that follows a run: the last event it showed itself, when it began (Turns' clock), and whether it failed. */
interface Follower extends Load {
  upTo: number;
  since: number;
  failed: boolean;
  /** The load is over, and did not fail: it never will, and what it shows is the connection's view for good. */
  over: boolean;
}

/**
 * The loads a connection follows a run by: the latest, and the one it followed the run by before
 * that one; `base`, whether it was shown the run's updates before any load followed it.
 */
class Through {
  constructor(
    readonly follower: Follower,
    public before: Through | undefined,
    readonly base: boolean,
  ) {}

  /**
   * Lets go of the loads before the first of these that is over: nothing looks past a load that
   * can't fail (heldFor, still), and a connection that loads a session again and again while its turn
   * runs would otherwise grow the chain by one a load, and each update's walk with it.
   */
  prune(): void {
    if (this.follower.over) {
      this.before = undefined;
      return;
    }
    for (let at = this.before; at !== undefined; at = at.before) {
      if (at.follower.over) {
        at.before = undefined;
        return;
      }
    }
  }

  /** The latest load before this one that did not fail: what the connection follows the run by, should this one fail. */
  get still(): Through | undefined {
    let before = this.before;
    while (before?.follower.failed) before = before.before;
    return before;
  }
}

/**
 * Whether a connection that follows a run by the loads `through` is shown an update, as they end:
 * `shows`, whether the view with a load does; `none`, whether the view with none of them does.
 */
function heldFor(through: Through | undefined, shows: (follower: Follower) => boolean, none: boolean): boolean | HeldFor {
  if (through === undefined) return none;
  const kept = shows(through.follower);
  // A load that is over never fails: what it shows is what the connection is shown.
  if (through.follower.over) return kept;
  const failed = heldFor(through.before, shows, none);
  return kept === failed ? kept : { load: through.follower, kept, failed };
}

/** Sends `updates` as `heldFor` says: not at all, at once, or held for the loads' end. */
function sendAs(sub: Subscriber, updates: readonly SessionUpdate[], heldFor: boolean | HeldFor): void {
  if (heldFor === false) return;
  for (const update of updates) sub.send(update, heldFor === true ? undefined : heldFor);
}

/**
 * Where a running turn stands in what it has shown its subscribers: the cut a load that follows it
 * shows the conversation up to, and what it streamed that no event holds yet.
 */
interface Shown {
  /** The last event no update still to come shows (undefined before the turn said where it writes). */
  cut: number | undefined;
  /** The event its message came after: its own events are those after it. */
  from: number | undefined;
  /** Its message is not shown yet: what it streams meanwhile reaches its followers after it. */
  awaiting: boolean;
  /** The text it streamed since its last answer was shown: an answer on its way, on disk not yet. */
  streamed: string;
  /** The last answer and the last tool result shown: the calls and results reported after each are theirs. */
  answer: number;
  result: number;
}

const fresh = (): Shown => ({ cut: undefined, from: undefined, awaiting: false, streamed: "", answer: 0, result: 0 });

/** Where a load that follows a running turn stands (Turns.follow). */
export interface Following {
  /** The last event the load shows itself: the turn shows every one of its own after it. */
  upTo: number;
  /** The event the turn's message came after, once it said: a call after it without its result yet is one it runs. */
  from: number | undefined;
  /** Stops following (the load failed): the connection is shown what it was before the load. */
  stop(): void;
  /** The load is over: a turn that begins from now on is not followed (the next load shows it). */
  loaded(): void;
}

/** A load under way: a turn of its conversation that begins meanwhile is followed from its start. */
interface Watch {
  dir: string;
  conversation: string | undefined;
  subscriber: Subscriber;
  follower: Follower;
  /** The conversation's last event on disk, where the load stops once a run it did not find begins. */
  onDisk: () => number;
  /** Each run it joined, with what undoes it. */
  joined: Map<Running, () => void>;
}

/** The answer to a message that no turn took because the conversation was stopped. */
const cancelled = (): TurnOutcome => ({ stop: "cancelled", modelMs: 0 });

const message = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** Has `subscriber` follow `run` from `follower`; returns what undoes it (its load failed). */
function join(run: Running, subscriber: Subscriber, follower: Follower): () => void {
  const before = run.through.get(subscriber);
  before?.prune();
  const mine = new Through(follower, before, before ? before.base : run.subscribers.has(subscriber));
  run.subscribers.add(subscriber);
  run.through.set(subscriber, mine);
  return () => {
    // Another load of the connection's since follows it now: left as that load has it.
    if (run.through.get(subscriber) !== mine) return;
    // Followed as the latest of its loads before this one that did not fail has it.
    const still = mine.still;
    if (still) {
      run.through.set(subscriber, still);
      return;
    }
    run.through.delete(subscriber);
    // The text held back from it was sent as it came, for the view without the load (broadcast).
    run.withheld.delete(subscriber);
    // One that sent the run a message is answered by it: it stays subscribed.
    if (!mine.base && !run.senders.has(subscriber)) run.subscribers.delete(subscriber);
  };
}

export class Turns {
  /**
   * Runs what a turn's listener does with a report: a failure of it is the front's own, logged, and
   * never thrown into the turn, which would take it for its model's or its store's.
   */
  private heard(key: string, step: () => void): void {
    try {
      step();
    } catch (e) {
      this.onError(key, e);
    }
  }

  private readonly running = new Map<string, Running>();
  private stopping = false;
  /** Orders messages and loads: which came first. */
  private clock = 0;
  private readonly watching = new Set<Watch>();

  constructor(private readonly onError: (key: string, error: unknown) => void = () => undefined) {}

  /** Whether a turn of any conversation of the chat in `dir` runs now. */
  isRunningIn(dir: string): boolean {
    for (const key of this.running.keys()) if (key === dir || key.startsWith(`${dir}${KEY_SEPARATOR}`)) return true;
    return false;
  }

  /** Whether a turn was ever started here. */
  started = false;

  get count(): number {
    return this.running.size;
  }

  /**
   * Answers the message: a new turn of the conversation `key`, or, while one runs, a message that
   * steers it. Resolves with the outcome of the turn that answered it; rejects with TurnFailed.
   */
  prompt(key: string, msg: IncomingMessage, verbosity: Verbosity, start: StartTurn, subscriber: Subscriber, owing?: Owing, names?: CallNamesBefore): Promise<TurnOutcome> {
    if (this.stopping) return Promise.reject(new StoppingError());
    let waiting!: Waiting;
    const answer = new Promise<TurnOutcome>((resolve, reject) => {
      waiting = { message: msg, owing, names, verbosity, start, from: subscriber, at: ++this.clock, resolve, reject };
    });
    const run = this.running.get(key);
    if (run) {
      run.subscribers.add(subscriber);
      run.senders.add(subscriber);
      (run.controller.signal.aborted ? run.after : run.queue).push(waiting);
      return answer;
    }
    this.started = true;
    const started: Running = { controller: new AbortController(), queue: [], after: [], subscribers: new Set([subscriber]), writing: false, shown: fresh(), senders: new Set([subscriber]), through: new Map(), withheld: new Map() };
    this.running.set(key, started);
    // A load of its conversation under way follows it from its start: all it writes comes after what the load shows.
    for (const w of this.watchersOf(key)) this.joinWatch(w, started);
    started.done = this.drive(key, started, waiting).catch((e: unknown) => this.abandon(key, started, e));
    return answer;
  }

  /**
   * Has `subscriber` (a connection that loads a session of the chat in `dir`) follow the turn of the
   * session's conversation that runs now (found as cancelIn finds it), from where it stands: what
   * the turn streamed that no event holds yet at once, and everything it shows from now on, the
   * messages it writes too; and, until the load is over, a turn of it that begins meanwhile, from its
   * start. `onDisk`: the conversation's last event, where the load stops when no turn has said yet
   * where it writes (every event a turn writes after it is shown then).
   */
  follow(dir: string, conversation: string | undefined, subscriber: Subscriber, onDisk: () => number): Following {
    const runs = this.runsIn(dir, conversation);
    const shown = runs[0]?.shown;
    // With no turn running, the load shows all it reads, until a turn begins (Turns.joinWatch).
    const follower: Follower = { upTo: shown ? (shown.cut ?? onDisk()) : Number.POSITIVE_INFINITY, since: ++this.clock, failed: false, over: false };
    const watch: Watch = { dir, conversation, subscriber, follower, onDisk, joined: new Map() };
    // A run waiting for the lock behind the one that writes: all it writes comes after, followed too.
    for (const run of runs) this.joinWatch(watch, run);
    this.watching.add(watch);
    // What it streamed before its message is shown follows the message (show, "event").
    if (shown && !shown.awaiting && shown.streamed.length > 0) subscriber.send(textUpdate(shown.streamed), { load: follower, kept: true, failed: false });
    return {
      get upTo() {
        return follower.upTo;
      },
      from: shown?.from,
      stop: () => {
        follower.failed = true;
        this.watching.delete(watch);
        for (const undo of watch.joined.values()) undo();
      },
      loaded: () => {
        follower.over = true;
        this.watching.delete(watch);
      },
    };
  }

  /**
   * Has a load under way follow a run of its conversation. One that begins while the load runs
   * writes after the conversation's last event then, where the load stops showing what it reads:
   * the run shows what it writes.
   */
  private joinWatch(watch: Watch, run: Running): void {
    if (watch.joined.has(run)) return;
    if (watch.follower.upTo === Number.POSITIVE_INFINITY) watch.follower.upTo = watch.onDisk();
    watch.joined.set(run, join(run, watch.subscriber, watch.follower));
  }

  /**
   * The loads under way that a run of `key` is followed by as it begins, and once it writes
   * (`writes`: the conversation it writes, holding the chat's lock): those of its own key; then those
   * of the chat's current conversation (of the chat's own session, for a run of a session naming
   * it) and those of a session naming the conversation the chat's own run writes.
   */
  private watchersOf(key: string, writes?: string): Watch[] {
    return [...this.watching].filter((w) => key === turnKey(w.dir, w.conversation) || (writes !== undefined && this.writesFor(key, writes, w.dir, w.conversation)));
  }

  /** Whether a run of `key` that writes `writes` writes what a session of the chat in `dir` (naming `conversation`) shows. */
  private writesFor(key: string, writes: string, dir: string, conversation: string | undefined): boolean {
    if (conversation === undefined) return key.startsWith(`${dir}${KEY_SEPARATOR}`);
    return key === dir && writes === conversation;
  }

  /**
   * The runs of a session's conversation, the one that writes now first: its own key's, and another
   * that writes the conversation now, holding the chat's lock: for the chat's current conversation,
   * one a session naming it runs (cancelIn); for a conversation a session names, the chat's own
   * session's, while that conversation is the chat's current one.
   */
  private runsIn(dir: string, conversation: string | undefined): Running[] {
    const own = this.running.get(turnKey(dir, conversation));
    if (own?.writing) return [own];
    for (const [k, run] of this.running) if (run.writing && this.writesFor(k, run.writes ?? "", dir, conversation)) return own ? [run, own] : [run];
    return own ? [own] : [];
  }

  /**
   * Aborts the turn of a session of the chat in `dir`: its conversation's, or, for a session of the
   * chat's current conversation (`conversation` left out) when none runs under that key, the turn a
   * session naming one of its conversations (`<thread>~<name>`) runs now, holding the chat's lock:
   * that conversation is the current one then. One waiting for the lock is left. False when none runs.
   */
  cancelIn(dir: string, conversation: string | undefined): boolean {
    if (this.cancel(turnKey(dir, conversation))) return true;
    if (conversation !== undefined) return false;
    for (const [k, run] of this.running) if (run.writing && this.writesFor(k, run.writes ?? "", dir, undefined)) return this.cancel(k);
    return false;
  }

  /**
   * /stop: aborts the conversation's running turn; false when none runs. A turn cancelled already
   * and still ending: the messages that came after that cancel, each to run as a turn of its own
   * once it ends, are cancelled now, as they would be had that turn begun.
   */
  cancel(key: string): boolean {
    const run = this.running.get(key);
    if (!run) return false;
    if (run.controller.signal.aborted) for (const w of run.after.splice(0)) w.resolve(cancelled());
    run.controller.abort();
    return true;
  }

  /** Takes no new turns; aborts the running ones when asked, and waits for every one to end. */
  async stop(abort: boolean): Promise<void> {
    this.stopping = true;
    const runs = [...this.running.values()];
    if (abort) for (const run of runs) run.controller.abort();
    await Promise.all(runs.map((run) => run.done));
  }

  /**
   * A run whose own steps failed (not its turn: that ends with a failure event): every message it
   * holds is answered with the failure, and the conversation is free for the next one, rather than
   * each message after it waiting for a run that is gone.
   */
  private abandon(key: string, run: Running, e: unknown): void {
    this.onError(key, e);
    const failed = new TurnFailed(undefined, `the turn could not go on: ${message(e)}`);
    for (const w of [...(run.answering ?? []), ...run.queue.splice(0), ...run.after.splice(0)]) w.reject(failed);
    if (this.running.get(key) === run) this.running.delete(key);
  }

  private async drive(key: string, run: Running, first: Waiting): Promise<void> {
    let current = first;
    for (;;) {
      const answered = [current];
      run.answering = answered;
      const steering: SteerQueue = {
        take: () => {
          const taken = run.queue.splice(0);
          answered.push(...taken);
          return taken.map((w) => w.message);
        },
      };
      const updates = new TurnUpdates(current.verbosity);
      const shown = (run.shown = fresh());
      // `about`: the event what is shown comes from, which a follower whose load showed it is not
      // shown again; `asked`, a message the turn wrote, shown to followers alone (a prompter knows
      // its own); `held`, what its followers are shown only once its message is.
      // A connection a load follows it by is shown what it is shown with that load, and, should the
      // load fail, what it would have been shown without it (the two held for the load's end).
      const broadcast = (list: SessionUpdate[], about?: number, asked?: { event: Event; from: Waiting | undefined }, held = false) => {
        const shows = (follower: Follower) => !(held || (about !== undefined && about <= follower.upTo));
        for (const sub of run.subscribers) {
          const through = run.through.get(sub);
          sendAs(sub, list, heldFor(through, shows, through === undefined || through.base || run.senders.has(sub)));
          // Its own message, sent after the load began, the connection knows.
          if (asked) sendAs(sub, askedUpdates(asked.event), heldFor(through, (follower) => !(asked.from?.from === sub && asked.from.at > follower.since), false));
        }
      };
      // The messages it writes are those it answers, in order: the first is its own, then those that steered it.
      let written = 0;
      // The conversation's call names, read while the model is asked: a call is shown only once
      // they are, and what the turn reports after it waits with it, in order.
      let naming: Promise<void> | undefined;
      let named = false;
      let held: TurnEvent[] | undefined;
      // What the turn has shown is noted as it is shown (a report held for its call's name is not yet).
      const show = (report: TurnEvent) => {
        const list = updates.map(report);
        switch (report.type) {
          case "asked":
            // Its first: what it writes comes after `after`, its message first.
            if (shown.from === undefined) {
              shown.from = report.after;
              shown.awaiting = true;
            }
            shown.cut = Math.max(shown.cut ?? 0, report.after);
            return;
          case "text":
            shown.streamed += report.delta;
            // Held back from its followers: from one that sent it a message, owed all the same.
            if (shown.awaiting) for (const sub of run.through.keys()) if (run.senders.has(sub)) run.withheld.set(sub, (run.withheld.get(sub) ?? "") + report.delta);
            return broadcast(list, undefined, undefined, shown.awaiting);
          case "event": {
            const e = report.event;
            shown.cut = Math.max(shown.cut ?? 0, report.n);
            if (e.kind === EVENT_KINDS.toolResult) shown.result = report.n;
            if (e.kind === EVENT_KINDS.message && e.role === "assistant") {
              shown.answer = report.n;
              shown.streamed = "";
            }
            broadcast(list, report.n, e.kind === EVENT_KINDS.message && e.role === "user" ? { event: e, from: answered[written++] } : undefined);
            // Its message shown (the first event it writes): then what it streamed before, to its followers.
            if (shown.awaiting) {
              shown.awaiting = false;
              // Shown again to the loads that rebuild the view (one that failed had it sent as it came).
              if (shown.streamed.length > 0) {
                for (const [sub, through] of run.through) sendAs(sub, [textUpdate(shown.streamed)], heldFor(through, (follower) => follower.upTo < report.n, false));
              }
              run.withheld.clear();
            }
            return;
          }
          case "tool_call":
            return broadcast(list, shown.answer);
          case "tool_result":
            return broadcast(list, shown.result);
          default:
            return broadcast(list);
        }
      };
      // Shows what was held, and from then on every report as it comes.
      const showHeld = () => {
        named = true;
        const waited = held ?? [];
        held = undefined;
        for (const r of waited) show(r);
      };
      let outcome: TurnOutcome | undefined;
      let error: unknown;
      try {
        outcome = await current.start(current.message, steering, run.controller.signal, (report) => this.heard(key, () => {
          // Each message the turn took is answered by its last answer from the message it writes now on.
          if (report.type === "asked") {
            // A run of a session naming the chat's current conversation, which it writes from now: followed by the chat's loads under way.
            if (!run.writing) for (const w of this.watchersOf(key, report.conversation ?? "")) this.joinWatch(w, run);
            run.writing = true;
            run.writes = report.conversation;
            for (const w of answered) w.owing?.mark(report.after, report.through, report.time);
            // Counted once the request is on its way (the event loop's next pass): nothing it names is shown before.
            const names = current.names;
            naming ??=
              names &&
              new Promise((resolve) => setImmediate(resolve))
                .then(() => names(report.after))
                .then(
                  (seed) => updates.seed(seed),
                  (e: unknown) => this.onError(key, e),
                )
                .finally(showHeld);
            // Where what it shows stands moves with what is shown, after what is held.
            if (held) held.push(report);
            else show(report);
          } else if (held) held.push(report);
          else if (report.type === "tool_call" && naming !== undefined && !named) held = [report];
          else show(report);
        }));
      } catch (e) {
        error = e;
      }
      const stopped = run.controller.signal.aborted || outcome?.stop === "cancelled";
      // A call held for its name is shown once the names are read; a turn that showed none, or was
      // stopped, is not kept waiting for them (a stopped one's calls are named as its own alone).
      if (held && !stopped) await naming;
      showHeld();
      const why = stopped
        ? "cancelled before this call was answered"
        : error !== undefined
          ? message(error)
          : (outcome?.failure?.message ?? "the turn ended before this call was answered");
      run.writing = false;
      broadcast(updates.finish(why));
      // Text held back from a follower that sent it a message, the turn's own never shown: shown now.
      // (Without any load it was shown as it came.)
      for (const [sub, text] of run.withheld) if (text) sendAs(sub, [textUpdate(text)], heldFor(run.through.get(sub), () => true, false));
      run.withheld.clear();

      for (const w of answered) {
        if (outcome && (stopped || !outcome.failure)) w.resolve(outcome);
        else if (stopped) w.resolve(cancelled());
        else w.reject(new TurnFailed(outcome, outcome?.failure?.message ?? message(error)));
      }
      if (stopped) {
        // What was waiting when it was cancelled is cancelled with it; what came after is not.
        for (const w of run.queue.splice(0)) w.resolve(cancelled());
        if (run.after.length === 0 || this.stopping) {
          for (const w of run.after.splice(0)) w.resolve(cancelled());
          this.running.delete(key);
          return;
        }
        run.controller = new AbortController();
        run.queue.push(...run.after.splice(0));
      }
      if (run.queue.length === 0) {
        this.running.delete(key);
        return;
      }
      // Arrived after the turn's last look at its queue: answered by a turn of their own.
      current = run.queue.shift() as Waiting;
    }
  }
}
