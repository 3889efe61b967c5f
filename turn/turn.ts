// One turn, stateless: reads what it needs through the store, asks the model, runs tools in rounds,
// and writes every event as it happens. It reports through a callback of plain events, never ACP.
import { parsedArguments, type AssistantMessage, type Event, type Failure, type ModelInput, type PromptPrints, type Settings, type StopReason, type ToolCall, type Usage, type UserMessage } from "../protocol/index.js";
import { beginEvent, dropEvent, dropSpares, flushHeld, makeSpares, prepareEvent, type BeginOptions, type BegunEvent, type PreparedEvent, forgetDerived, forgetEvents, forgetSettings, EventGapError, keepWindowFile, LockLostError, paths, readSettings, readToolsList, withConversationLock, type ConversationPaths } from "../store/index.js";
import { forgetBodies } from "./body.js";
import { runCalls } from "./calls.js";
import { conversationShare, modelInputs, modelWindow, type ModelWindow } from "./facts.js";
export { statusLines } from "./status.js";
import { sectionPrints, windowPrint } from "./fingerprint.js";
import { FIRST } from "./chat.js";
import { forgetHistories, History, resumeEvent } from "./history.js";
import { partsFor } from "./parts.js";
import { askModel, ModelError, type ModelAnswer } from "./model.js";
import { eventsToMessages, type ChatMessage } from "./prompt.js";
import { composeSections, messageHeader, systemPrompt } from "./sections.js";
import { openOptions, type OfferedCall, type ToolBox } from "./tools.js";
import { updateTranscript } from "./transcript.js";
import type { IncomingMessage, TurnInput, TurnListener, TurnOutcome } from "./types.js";
import { addTokens, promptChanges, usageReport } from "./usage.js";
import { roughTokens } from "./window.js";

/**
 * A controller aborted as soon as `source` is, with its reason (at once if it is already), which its
 * owner may abort for reasons of its own too: one signal for the two, where a signal for each and a
 * third made of both (AbortSignal.any, or a controller listening to each) made a turn's first steps
 * pay for two controllers more and their listeners.
 */
function following(source: AbortSignal | undefined): AbortController {
  const own = new AbortController();
  if (source?.aborted) own.abort(source.reason);
  else source?.addEventListener("abort", () => own.abort(source.reason), { once: true });
  return own;
}

/** At most eight rounds of calls; then the model is asked once more and told to call nothing. */
export const MAX_ROUNDS = 8;

/**
 * Tokens of instructions and tools that leave room in any window of 1,024 tokens or more (its
 * answer's share a quarter, its margin 256): fewer, and a new conversation's first request is sent
 * without waiting for the window. More (most agents with tools), and it waits, a runtime being asked
 * only once for its model (some milliseconds): Ollama cuts a prompt longer than its context short,
 * with no error, so what fills the window is said before anything is sent, at the first turn too.
 */
export const FILL_NO_WINDOW = 512;

/**
 * The message as an event. With what the model reads, only the parts it takes, within the contract's
 * limits, are kept to be sent, and the text names each one left out and why (turn/parts.ts).
 */
export function userEvent(message: IncomingMessage, inputs?: readonly ModelInput[]): UserMessage {
  const time = message.time ?? new Date();
  const { text, parts } = inputs ? partsFor(message.text, message.parts, inputs) : { text: message.text, parts: message.parts };
  return {
    v: 1,
    kind: "message",
    role: "user",
    time: time.toISOString(),
    text,
    ...(parts?.length ? { parts } : {}),
    ...(message.from ? { from: message.from } : {}),
    ...(message.channel ? { channel: message.channel } : {}),
    ...(message.cwd ? { cwd: message.cwd } : {}),
    header: messageHeader(time, message.channel, message.from),
    ...(message.skill ? { skill: message.skill } : {}),
  };
}

/** Why the model stopped, in the events' words. */
function stopOf(answer: ModelAnswer, calls: boolean): StopReason {
  if (answer.aborted) return "cancelled";
  if (calls) return "tool_calls";
  if (answer.finishReason === "length") return "max_tokens";
  if (answer.finishReason === "content_filter") return "refusal";
  return "end_turn";
}

/** The agent's answer as an event: the provider's own counts, and the cost only when reported. */
function answerEvent(answer: ModelAnswer, o: { model: string; provider: string; toolCalls: ToolCall[]; stop: StopReason; prompt: PromptPrints }): AssistantMessage {
  return {
    v: 1,
    kind: "message",
    role: "assistant",
    time: new Date().toISOString(),
    text: answer.text,
    model: o.model,
    provider: o.provider,
    ...(answer.responseId ? { response_id: answer.responseId } : {}),
    ...(answer.usage ? { usage: answer.usage } : {}),
    latency_ms: answer.latencyMs,
    ...(answer.cost !== undefined ? { cost: answer.cost } : {}),
    ...(answer.leftOut ? { left_out: answer.leftOut } : {}),
    prompt: o.prompt,
    ...(answer.thinking ? { thinking: answer.thinking } : {}),
    ...(o.toolCalls.length ? { tool_calls: o.toolCalls } : {}),
    stop: o.stop,
  };
}

class Turn {
  readonly usage: Usage = { in: 0, out: 0, cached: 0 };
  private sawUsage = false;
  private lastAnswer: number | undefined;
  private modelMs = 0;

  constructor(
    readonly input: TurnInput,
    readonly listener: TurnListener,
    readonly signal: AbortSignal,
    /** The paths the turn's lock was taken with: every write through them goes through its folder. */
    readonly conv: ConversationPaths,
    /** Whether the files of the conversation's next turn are made ahead (runTurn's `spare`). */
    private readonly spare = false,
  ) {}

  private writes: Promise<unknown> = Promise.resolve();

  /**
   * Writes an event; a turn's events are written one after another, so they're numbered in order.
   * An answer is written into the file made for it while the model answered (`into`), and the turn
   * waits for it with nothing else to do.
   */
  write(event: Event, history?: History, into?: PreparedEvent): Promise<number> {
    return this.chain(event, (n) => history?.written(n, event), into, { waited: into !== undefined });
  }

  /** The file of the round's answer, being made while the model answers (store/events.ts prepareEvent). */
  private prepared: Promise<PreparedEvent | undefined> | undefined;

  /** Whether the turn has ended: nothing more is made ahead for it. */
  private ended = false;

  /** The next turn's files being made, through the folder this turn's lock holds (store/spares.ts). */
  private sparing: Promise<void> | undefined;

  /**
   * Makes the next answer's file ahead, if it has none; one that can't be made is made when it is
   * written. Then, with `spare`, the files the next events take (the next round's, the next turn's)
   * where any are missing: while the model answers, through the folder held now, rather than once the
   * lock is let go, when the next prompt may be under way already and would wait for a folder opened
   * and files made.
   */
  private prepare(): void {
    if (this.prepared || this.ended) return;
    const prepared = (this.prepared = prepareEvent(this.conv).catch(() => undefined));
    if (this.spare) this.sparing = Promise.all([this.sparing, prepared]).then(() => makeSpares(this.conv)).catch(() => undefined);
  }

  /** The file made ahead, taken for the answer it was made for, once it is made. */
  private async takePrepared(): Promise<PreparedEvent | undefined> {
    const it = this.prepared;
    this.prepared = undefined;
    return it;
  }

  /** Lets an answer's file made ahead and not used go, once it is made: before the turn's lock is let go. */
  async dropPrepared(): Promise<void> {
    const it = await this.takePrepared();
    if (it) dropEvent(it);
  }

  /**
   * Resolves once the next turn's files are made: before the turn's lock is let go, and its folder
   * closed, which names them. Whether the turn made them (it asked the model).
   */
  async spared(): Promise<boolean> {
    await this.sparing;
    return this.sparing !== undefined;
  }

  /**
   * Writes an event that is in the history already, at the number it will take: the model is asked
   * while it is written and flushed to disk. Its file is begun once the request is on its way (the
   * event loop's next pass): making a file costs this disk a quarter of a millisecond, and its
   * thread in the pool took a core from the request's way out. The turn still ends only once it is
   * written, and nothing after it is linked before it (chain).
   */
  writeAhead(event: Event, history: History): Promise<number> {
    // A new conversation's first event, whose flush carries the folder made for it too, is begun at
    // once: the longer of the two, it would hold up the answer's link.
    const later = history.events.length > 0;
    const expected = history.ahead(event);
    return this.chain(event, (n) => history.settle(expected, n), undefined, { later });
  }

  /**
   * Once a write fails, the writes after it fail with it: nothing is written past a missing event.
   * Each event's file is written and flushed at once, while those before it may still be flushing;
   * it is linked to its number only after them, so the numbers keep the turn's order.
   */
  private chain(event: Event, written: (n: number) => void, into?: PreparedEvent, o: BeginOptions = {}): Promise<number> {
    // Through the folder the lock holds, checked, and only while the lock is this process's.
    let begun: BegunEvent;
    try {
      begun = beginEvent(this.conv, event, into, o);
    } catch (e) {
      if (into) dropEvent(into);
      // Refused as it is (invalid, too large): nothing written, and nothing after it.
      const refused = Promise.reject(e as Error);
      refused.catch(() => undefined);
      this.writes = refused;
      return refused;
    }
    const done = this.writes.then(
      async () => {
        const n = await begun.link();
        written(n);
        this.listener({ type: "event", n, event });
        return n;
      },
      async (e: unknown) => {
        await begun.abandon();
        throw e;
      },
    );
    this.writes = done;
    done.catch(() => undefined);
    return done;
  }

  outcome(stop: StopReason, failure?: TurnOutcome["failure"]): TurnOutcome {
    return {
      stop,
      modelMs: this.modelMs,
      ...(this.sawUsage ? { usage: this.usage } : {}),
      ...(failure ? { failure } : {}),
      ...(this.lastAnswer !== undefined ? { answer: this.lastAnswer } : {}),
    };
  }

  async fail(reason: Failure["reason"], message: string, history?: History, extra: Partial<Failure> = {}): Promise<TurnOutcome> {
    await this.write({ v: 1, kind: "failure", time: new Date().toISOString(), reason, message, ...extra }, history);
    return this.outcome("end_turn", { reason, message });
  }

  /** The turn's end, when what its window holds is past the conversation's share of it: `what` was not done. */
  private async outgrew(history: History, known: { window: { window: number; source: string }; budget: number }, what: string): Promise<TurnOutcome | undefined> {
    const held = history.count.total - history.count.tokensBefore;
    if (held <= known.budget) return undefined;
    const message = `this turn's rounds outgrew the window: its messages hold about ${held} tokens, past the conversation's share ${known.budget} (window ${known.window.window} from ${known.window.source}), so ${what}: ask for less at a time, or start a new conversation with /new`;
    const outcome = await this.fail("context_too_long", message, history);
    this.finish(history);
    return outcome;
  }

  /** The turn's end, when the instructions and the tools offered (`fixed` tokens) take all the window leaves a request. */
  private async crowded(history: History, window: ModelWindow, fixed: number, calls: readonly OfferedCall[]): Promise<TurnOutcome> {
    const message = `the instructions and the tools offered take about ${fixed} tokens${offeredText(calls, "of them")}, all the ${window.window}-token window (from ${window.source}) leaves a request: the request was not sent. Narrow the agent's tools (its tools.json, or the session's mcpServers), or use a model with a larger window`;
    const outcome = await this.fail("context_too_long", message, history);
    this.finish(history);
    return outcome;
  }

  /** The question's write, once begun. */
  private question: Promise<number> | undefined;

  async run(): Promise<TurnOutcome> {
    try {
      const settings = this.input.settings ?? readSettings(this.input.agent);
      if (!settings) {
        return await this.refuse(`the agent has no settings: run lnk-link-harness configure --agent ${this.input.agent.dir}`);
      }
      let box: ToolBox | undefined;
      try {
        if (this.input.tools && this.input.toolServers?.length) {
          const allowed = readToolsList(this.conv);
          box = await this.input.tools.open(this.input.toolServers, { ...(allowed ? { allowed } : {}), signal: this.signal, ...openOptions(this.input.agent, settings) });
        }
        return await this.rounds(settings, box);
      } finally {
        // A round's request that ended at once (its signal aborted) may have left its making ahead to come.
        this.ended = true;
        await this.dropPrepared();
        // No write of the turn is under way once it ends: its files are named through the folder its lock holds.
        await this.writes.catch(() => undefined);
        // Its tools' sessions end now; their processes are waited for by the tool host (when it
        // closes, as the process stops), never by the turn's answer or its lock: a tool slow to
        // exit held both for seconds.
        void box?.close().catch(() => undefined);
      }
    } catch (e) {
      // Once the lock is lost, nothing more is written, not even why.
      if (e instanceof LockLostError) throw e;
      // Nor where its events are after a gap: its question and why would land where none reads.
      if (e instanceof EventGapError) throw e;
      // A store, facts or tools error: a failed turn is an event, whenever the folder can take it.
      try {
        return await this.refuse((e as Error).message);
      } catch {
        throw e;
      }
    }
  }

  /** Keeps the question (unless it is written already) and a failure event saying why the turn could not run. */
  private async refuse(message: string): Promise<TurnOutcome> {
    if (this.question === undefined) await this.write(userEvent(this.input.message));
    else await this.question;
    return this.fail("internal", message);
  }

  private async rounds(settings: Settings, box: ToolBox | undefined): Promise<TurnOutcome> {
    const calls = box?.offered ?? [];
    const sections = composeSections(this.input.agent, settings, calls, this.input.message.cwd);
    const system = systemPrompt(sections);
    const prints = sectionPrints(sections, calls);
    const fixed = roughTokens(system) + (calls.length ? roughTokens(JSON.stringify(calls.map((c) => [c.name, c.description, c.parameters]))) : 0);
    let asked: Promise<ModelWindow> | undefined;
    if (this.input.conversation !== undefined) await this.enter(this.input.conversation);
    const agentModel = this.input.agentModel ?? settings.model.name;
    const facts = this.input.env ? { env: this.input.env } : {};
    // The conversation's share: the window less the answer's, the instructions and tools, and the margin.
    // A new conversation's first request needs none of it (nothing of it can drop): the runtime that
    // tells the window may still be answering while the model is asked; the answer waits for it.
    // Unless the instructions and tools are many (FILL_NO_WINDOW).
    const history = await History.load(
      this.conv,
      async (chosen) => conversationShare(await (asked = modelWindow(settings, chosen ?? agentModel, facts)), fixed, settings),
      { later: true },
    );
    const model = history.model ?? agentModel;
    if (history.chosen.verbosity !== undefined) this.listener({ type: "verbosity", verbosity: history.chosen.verbosity });
    const windowAsked = asked ?? modelWindow(settings, model, facts);
    // A new conversation's first request waits for the window only when its instructions and tools
    // could fill one (crowded, below): a runtime might otherwise cut them short without a word.
    let window = history.waiting && fixed < FILL_NO_WINDOW ? undefined : await windowAsked;
    /** The window and the budget, once the runtime has said (at once, unless the history was loaded `later`). */
    const windowKnown = async () => ({ window: (window ??= await windowAsked), budget: await history.sure() });
    const inputs = window?.inputs ?? modelInputs(model, facts.env);
    // The message is flushed while the model is asked; should writing it fail, the ask is cut short.
    const asks = following(this.signal);
    const question = userEvent(this.input.message, inputs);
    const opening = this.writeAhead(question, history);
    const writes = history.conversation ?? FIRST;
    this.listener({ type: "asked", after: (history.events.at(-1)?.n ?? 1) - 1, through: this.conv, conversation: writes, time: question.time });
    this.question = opening;
    opening.catch((e: unknown) => asks.abort(e));
    const signal = asks.signal;
    const changed = promptChanges(history.events, prints);
    if (changed.length > 0) this.listener({ type: "prompt_changed", sections: changed });

    let round = 0;
    let lastText: string;
    for (;;) {
      const steering = [...this.pendingSteer.splice(0), ...(this.input.steering?.take() ?? [])];
      // A message more may drop what came before: counted with the budget.
      if (steering.length > 0) await windowKnown();
      for (const m of steering) {
        const steered = userEvent(m, inputs);
        const n = await this.write(steered, history);
        this.listener({ type: "asked", after: n - 1, through: this.conv, conversation: writes, time: steered.time });
      }
      // A turn's own rounds never drop from its window: past the conversation's share, the request
      // is one the endpoint would refuse, or take whole at the window's cost. Said here, not sent.
      const outgrown = round > 0 ? await this.outgrew(history, await windowKnown(), "the next round was not sent") : undefined;
      if (outgrown) return outgrown;
      // Instructions and tools that leave the conversation no room in the window: a request every
      // endpoint refuses, whatever the conversation holds, and that a new conversation would not mend.
      const crowded = round === 0 && window !== undefined && fixed >= conversationShare(window, 0, settings) ? await this.crowded(history, window, fixed, calls) : undefined;
      if (crowded) return crowded;
      const callNothing = round >= MAX_ROUNDS;
      const messages: ChatMessage[] = [{ role: "system", content: system }, ...eventsToMessages(history.window(), { tools: calls.length > 0 })];
      let answer: ModelAnswer;
      const asked = performance.now();
      let streamed = false;
      try {
        const asking = askModel({
          settings,
          model,
          messages,
          calls,
          callNothing,
          signal,
          conversation: this.conv.dir,
          ...facts,
          onText: (delta) => {
            streamed = true;
            this.listener({ type: "text", delta });
          },
        });
        // The request is written by the time the event loop comes round (Node's HTTP client
        // writes it at its next tick): then the answer's file is made, while the model answers.
        setImmediate(() => this.prepare());
        answer = await asking;
      } catch (e) {
        this.modelMs += performance.now() - asked;
        await opening;
        if (!(e instanceof ModelError)) throw e;
        const sent = { messages: messages.length, tokens: messages.reduce((s, m) => s + roughTokens(JSON.stringify(m)), 0) };
        const known = await windowKnown();
        const message =
          e.reason === "context_too_long"
            ? `the model refused the prompt as too long: sent ${sent.messages} messages, about ${sent.tokens} tokens${offeredText(calls, "and")} (window ${known.window.window} from ${known.window.source}, conversation's share ${known.budget}): ${e.message}`
            : e.message;
        const outcome = await this.fail(e.reason, message, history, { sent, ...(e.status ? { status: e.status } : {}) });
        this.finish(history);
        return outcome;
      }
      this.modelMs += answer.waitedMs;
      if (answer.usage) {
        this.sawUsage = true;
        addTokens(this.usage, answer.usage);
      }
      // Past the last round, calls the model makes anyway are not run.
      const toolCalls = callNothing ? [] : answer.toolCalls;
      const stop = stopOf(answer, toolCalls.length > 0);
      const report = (size: number) => this.listener(usageReport(this.conv, answer, messages, size, (message) => this.listener({ type: "warning", message })));
      // The usage is handed to the client before the answer is written when nothing of it waits on
      // that: the window known, no cost to count with this answer's own, and its text shown already.
      // It leaves with the prompt's response, once the answer is flushed: yielding first, so that it
      // left before the flush, cost the answer a pass of the event loop.
      const known = window;
      const reportNow = known !== undefined && answer.cost === undefined && (streamed || !answer.text);
      if (reportNow) report(known.window);
      let answering: Promise<number> | undefined;
      if (!answer.aborted || answer.text || toolCalls.length) {
        const prompt = { sections: prints, window: windowPrint(history.count.start, history.count.startTime) };
        const event = answerEvent(answer, { model, provider: settings.model.provider, toolCalls, stop, prompt });
        // Written and flushed while the question may still be flushing: linked after it, and not
        // at all if it couldn't be written (chain).
        answering = this.write(event, history, await this.takePrepared());
      }
      // The question is on disk before anything after it is linked, and before the turn ends
      // (cancelled or not); if it couldn't be written, the turn fails with why.
      await opening;
      if (answering) {
        const n = await answering;
        if (answer.text.trim()) this.lastAnswer = n;
      }
      if (!reportNow) report((await windowKnown()).window.window);
      if (answer.aborted) {
        this.finish(history);
        return this.outcome("cancelled");
      }
      lastText = answer.text;
      if (toolCalls.length) {
        // Calls whose answers could never be sent are not run.
        const over = await this.outgrew(history, await windowKnown(), "its calls were not run");
        if (over) return over;
        for (const c of toolCalls) this.listener({ type: "tool_call", id: c.id, name: c.name, arguments: parsedArguments(c.arguments) });
        await runCalls(toolCalls, box, this.signal, async ({ call, result, media }) => {
          await this.write(result, history);
          this.listener({ type: "tool_result", id: call.id, name: call.name, status: result.error ? "failed" : "completed", text: result.text, ...(media ? { media } : {}) });
        });
        round++;
        if (this.signal.aborted) {
          this.finish(history);
          return this.outcome("cancelled");
        }
        continue;
      }
      // A message that steers a running turn is answered, even past the last round of calls.
      if (this.input.steering && this.peekSteering()) continue;
      this.finish(history);
      if (callNothing && !lastText.trim()) return this.outcome("max_turn_requests");
      return this.outcome(stop === "tool_calls" ? "end_turn" : stop);
    }
  }

  /** Makes the session's conversation the chat's current one, if another is. */
  private async enter(conversation: string): Promise<void> {
    const resume = resumeEvent(this.conv, conversation);
    if (resume) await this.write(resume);
  }

  private pendingSteer: IncomingMessage[] = [];
  private peekSteering(): boolean {
    const more = this.input.steering?.take() ?? [];
    this.pendingSteer.push(...more);
    return this.pendingSteer.length > 0;
  }

  /** The history whose copy and mark are brought up to date once the turn is answered. */
  private derived: History | undefined;

  private finish(history: History): void {
    this.derived = history;
  }

  /**
   * The copy, the mark and the window's events file: derived, brought up to date at the end of the
   * turn, still under its lock but after its answer (the next turn of the conversation waits for the
   * lock). The answer is stored by now, so a failure here is reported as a warning, never as a failed
   * turn (a client would send the message again): the next turn makes them again.
   */
  settle(): void {
    const history = this.derived;
    if (!history) return;
    try {
      const copyEnd = updateTranscript(this.conv, history.events);
      const loads = history.saveMark(copyEnd);
      if (loads) keepWindowFile(this.conv, loads);
    } catch (e) {
      this.listener({ type: "warning", message: `the conversation's derived files were not brought up to date: ${(e as Error).message}` });
    }
  }
}

/**
 * Forgets all a process keeps between turns: parsed events, settings and derived files, each conversation's count,
 * the last request's bytes, the files made ahead for the next turns (spares). Each is a cache of
 * what is on disk, so this changes no answer, only how long a turn takes: as in a process that just
 * started.
 */
export function forgetProcessState(): void {
  forgetEvents();
  forgetSettings();
  forgetDerived();
  forgetHistories();
  forgetBodies();
  dropSpares();
}

/** Turns that answered and still bring their derived files up to date and let their lock go. */
const settling = new Set<Promise<unknown>>();

/**
 * Resolves once every turn that answered early has let its lock go, and the files made ahead for
 * the next turns are made (a process waits for it to stop: a file the thread pool made after the
 * process's exit removed its name would be left behind).
 */
export async function turnsSettled(): Promise<void> {
  while (settling.size > 0) await Promise.allSettled([...settling]);
}

/** Notes work that goes on after a turn, which a process waits for as it stops (turnsSettled). */
function settleLater(work: Promise<unknown>): void {
  settling.add(work);
  void work.catch(() => undefined).finally(() => settling.delete(work));
}

/**
 * The calls a request offered, as a refusal of it as too long names them: their descriptions and
 * schemas take the window too, and a tool that lists megabytes of them fills it whatever the
 * conversation holds, which a new conversation would not mend. `joiner` leads them into the
 * sentence they end ("and", "of them").
 */
function offeredText(calls: readonly { name: string; description: string; parameters: unknown }[], joiner: string): string {
  if (calls.length === 0) return "";
  const tokens = calls.reduce((s, c) => s + roughTokens(c.name) + roughTokens(c.description) + roughTokens(JSON.stringify(c.parameters) ?? ""), 0);
  return `, ${joiner} ${calls.length} tool calls offered, about ${tokens} tokens`;
}

/**
 * Runs one turn of a conversation, holding its lock (one turn at a time per conversation). Resolves
 * once the lock is let go; with `early`, once the turn's events are on disk, their names flushed,
 * while its derived files are brought up to date and its lock let go after (turnsSettled). With
 * `spare`, the files of the conversation's next turn are made while the model answers, or once its
 * lock is let go where it never asked (a long-lived process's: store/spares.ts).
 */
export async function runTurn(input: TurnInput, listener: TurnListener, o: { early?: boolean; spare?: boolean } = {}): Promise<TurnOutcome> {
  const conv = paths(input.agent).conversation(input.thread);
  // The turn's signal: the caller's, or the lock lost (`lost`, why).
  const stop = following(input.signal);
  const signal = stop.signal;
  let lost: Error | undefined;
  const lostError = () => new LockLostError(conv, lost?.message ?? "taken over");
  let answer: ((outcome: TurnOutcome) => void) | undefined;
  const answered = new Promise<TurnOutcome>((resolve) => (answer = resolve));
  let spared = false;
  const whole = (async () => {
    const outcome = await withConversationLock(
      conv,
      async () => {
        const turn = new Turn(input, listener, signal, conv, o.spare);
        try {
          const outcome = await turn.run();
          if (o.early && lost === undefined) {
            await flushHeld(conv);
            // The lock could be lost while its folder was flushed: then the whole turn says so.
            if (lost === undefined) {
              answer?.(outcome);
              // The answer goes out first: what the caller does with it runs before the copy is made.
              await new Promise((resolve) => setImmediate(resolve));
            }
          }
          turn.settle();
          return outcome;
        } finally {
          spared = await turn.spared();
        }
      },
      {
        ...(input.signal ? { signal: input.signal } : {}),
        // Another process took the conversation over: stop writing to it.
        onCompromised: (err) => {
          lost ??= err instanceof Error ? err : new Error("taken over");
          stop.abort(lost);
        },
      },
    );
    // The conversation's next events' files, where the turn made none while the model answered (it
    // never asked), made now that nothing waits for them (store/spares.ts); none once its lock was
    // lost: another process holds the conversation now.
    if (o.spare && !spared && lost === undefined) settleLater(new Promise((resolve) => setImmediate(resolve)).then(() => makeSpares(conv)));
    // Stopped because the lock was lost, not by the client: said as that, never as a cancel.
    if (lost !== undefined) throw lostError();
    return outcome;
  })();
  if (!o.early) return whole;
  settleLater(whole);
  return Promise.race([answered, whole]);
}
