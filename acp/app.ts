// The ACP agent: one app a connection, every connection sharing the process's sessions and turns.
import * as acp from "@agentclientprotocol/sdk";
import type { AgentContext, McpServer, PromptResponse, StopReason as AcpStopReason } from "@agentclientprotocol/sdk";
import type { Usage as AcpUsage } from "@agentclientprotocol/sdk/unstable";
import { z } from "zod";
import type { From, Settings, StopReason, Usage, Verbosity } from "../protocol/index.js";
import { lastEventNumber, lockedElsewhere, readSettings } from "../store/index.js";
import type { IncomingMessage, TurnOutcome } from "../turn/types.js";
import { CallNames } from "./call-names.js";
import { promptContent } from "./content.js";
import type { AcpDeps } from "./deps.js";
import { METHOD_NOT_FOUND, toRequestError } from "./errors.js";
import { initializeResult } from "./initialize.js";
import { owe } from "./delivery.js";
import { groupSession, onlyMention } from "./groups.js";
import { LinkConnection, withLinkMethods } from "./link.js";
import { NewSessionLink, NOT_TEXT_METHOD, OVERSIZED_METHOD, ParamsError, PromptLink, SessionLink, TOO_DEEP_METHOD, parseLink, servedAgent } from "./meta.js";
import { configOptions, configOptionsNow, setModel } from "./model.js";
import { availableCommands } from "./commands.js";
import { ASP_EXPORT, ASP_IMPORT, aspExport, aspImport } from "./asp.js";
import { parseCommand, runCommand, type CommandContext } from "../turn/commands.js";
import { Sessions, type SessionState } from "./sessions.js";
import type { Outbox } from "./outbox.js";
import { turnKey, Turns, type StartTurn, type Subscriber } from "./turns.js";

const Oversized = z.object({ bytes: z.number(), max: z.number() });
const TooDeep = z.object({ max: z.number() });
const NotText = z.object({});

/** What every connection shares: the agent's sessions and the turns running. */
export class AcpState {
  readonly sessions: Sessions;
  readonly turns: Turns;
  /** The agent's model as `/model:set --agent` set it: this process's alone, until the agent starts again. */
  agentModel: string | undefined;
  /** Each conversation's causes of a changed prompt already logged: each is logged once. */
  private readonly promptWarned = new Set<string>();

  constructor(readonly deps: AcpDeps) {
    this.turns = new Turns((key, e) => deps.log.error("turn loop failed", { thread: key, error: (e as Error).message }));
    this.sessions = new Sessions(deps.agent, deps.log, (thread) => this.turns.isRunningIn(this.sessions.conversation(thread).dir));
  }

  /**
   * A turn's system prompt differs from the previous turn's: one line on the log for each section,
   * once per conversation and section, since the provider's cache holds the prompt only up to it.
   */
  promptChanged(thread: string, sections: readonly string[]): void {
    for (const section of sections) {
      const key = `${thread}\0${section}`;
      if (this.promptWarned.has(key)) continue;
      if (this.promptWarned.size >= 4096) this.promptWarned.clear();
      this.promptWarned.add(key);
      this.deps.log.warn("the system prompt changed since the previous turn: the provider's cache holds it only up to this section", { thread, cause: "section", section });
    }
  }

  /** Settings as they are now; unreadable ones are left to the turn, which records why it can't run. */
  settings(): Settings | undefined {
    if (this.deps.settings) return this.deps.settings();
    try {
      return readSettings(this.deps.agent);
    } catch (e) {
      this.deps.log.warn("settings unreadable", { error: (e as Error).message });
      return undefined;
    }
  }
}

function checkServers(servers: readonly McpServer[]): void {
  for (const s of servers) {
    if ("type" in s && s.type === "sse") throw new ParamsError(`mcpServers: ${s.name}: SSE is not supported (mcpCapabilities.http is)`);
  }
}

function acpStop(stop: StopReason): AcpStopReason {
  switch (stop) {
    case "end_turn":
    case "max_tokens":
    case "max_turn_requests":
    case "refusal":
    case "cancelled":
      return stop;
    case "tool_calls":
      return "end_turn";
    default: {
      const never: never = stop;
      throw new Error(`unknown stop reason ${String(never)}`);
    }
  }
}

function acpUsage(u: Usage): AcpUsage {
  return { inputTokens: u.in, outputTokens: u.out, cachedReadTokens: u.cached, totalTokens: u.in + u.out };
}

function promptResponse(outcome: TurnOutcome): PromptResponse {
  // `usage` is unstable in ACP v1 and passes through the stable schema as it is.
  const response: PromptResponse & { usage?: AcpUsage } = { stopReason: acpStop(outcome.stop) };
  if (outcome.usage) response.usage = acpUsage(outcome.usage);
  return response;
}

/** The app of one connection. */
export function createAgentApp(state: AcpState, outbox: Outbox, connection = new LinkConnection(false)): acp.AgentApp {
  const { deps, sessions, turns } = state;
  const { log } = deps;
  const served = deps.names ?? [servedAgent(deps.agent)];

  // Each handler's failure is answered with an error a person can act on.
  const guard =
    <C extends { method: string }, R>(handler: (ctx: C) => Promise<R> | R) =>
    async (ctx: C): Promise<R> => {
      try {
        return await handler(ctx);
      } catch (e) {
        throw toRequestError(e, ctx.method, log);
      }
    };

  const verbosityOf = (settings: Settings | undefined, asked?: Verbosity): Verbosity => asked ?? settings?.verbosity ?? "new";

  /** The key of the turns of the conversation a session names (a chat's current one, or `<thread>~<name>`). */
  const turnOf = (named: { thread: string; conversation?: string }): string => turnKey(sessions.conversation(named.thread).dir, named.conversation);
  /** Stops the turn a session runs: its conversation's, the chat's current one's for a session of the chat. */
  const stopTurn = (named: { thread: string; conversation?: string }): boolean => turns.cancelIn(sessions.conversation(named.thread).dir, named.conversation);

  /**
   * The group turns each session's prompts wait on (a group's message runs in its group's
   * conversation, not its session's): a cancel or a close of the session stops them too.
   */
  const groupTurns = new Map<string, Map<string, number>>();
  const waitOn = (sessionId: string, key: string): (() => void) => {
    const keys = groupTurns.get(sessionId) ?? new Map<string, number>();
    groupTurns.set(sessionId, keys);
    keys.set(key, (keys.get(key) ?? 0) + 1);
    return () => {
      const n = (keys.get(key) ?? 1) - 1;
      if (n > 0) keys.set(key, n);
      else keys.delete(key);
      if (keys.size === 0 && groupTurns.get(sessionId) === keys) groupTurns.delete(sessionId);
    };
  };
  const stopGroupTurns = (sessionId: string): void => {
    for (const key of groupTurns.get(sessionId)?.keys() ?? []) turns.cancel(key);
  };

  /** The names of the tools a session's conversation reaches, as a turn would find them. */
  const toolNames = (session: SessionState, settings: Settings | undefined): string[] =>
    (deps.discoverTools?.(settings?.tools, session.mcpServers) ?? []).map((t) => t.name);

  const commandContext = (session: SessionState, settings: Settings | undefined, from?: From, time = new Date()): CommandContext => ({
    agent: deps.agent,
    thread: session.thread,
    ...(session.conversation !== undefined ? { conversation: session.conversation } : {}),
    settings,
    ...(from ? { from } : {}),
    time,
    ...(session.cwd !== undefined ? { cwd: session.cwd } : {}),
    stop: () => stopTurn(session),
    agentModel: {
      get: () => state.agentModel,
      set: (model) => {
        state.agentModel = model;
        log.info("the agent's model is set for this process", { model: model ?? settings?.model.name });
      },
    },
    status: () =>
      (deps.status ?? (() => Promise.resolve(["The conversation's status is not available in this process."])))({
        agent: deps.agent,
        thread: session.thread,
        settings,
        ...(state.agentModel !== undefined ? { agentModel: state.agentModel } : {}),
        ...(session.cwd !== undefined ? { cwd: session.cwd } : {}),
        tools: toolNames(session, settings),
      }),
  });

  /** Tells the client the commands it can offer: after the response that opened the session. */
  const announceCommands = (client: AgentContext, sessionId: string, cwd: string | undefined, later: boolean) => {
    const send = () => outbox.send(client, sessionId, { sessionUpdate: "available_commands_update", availableCommands: availableCommands(deps.agent, cwd, log, deps.settings?.()) });
    if (later) setImmediate(send);
    else send();
  };

  /**
   * What a session just opened (new, loaded, resumed) is answered with: its options at once, and the
   * endpoint's models, when they weren't known yet, as a `config_option_update` once both its answer
   * was written and the endpoint answered. Its first turn's facts are asked meanwhile.
   */
  const opened = (client: AgentContext, session: SessionState, requestId: acp.RequestId | null) => {
    const settings = state.settings();
    if (settings) deps.ready?.(settings, state.agentModel);
    const { options, later } = configOptionsNow(sessions, session, settings, state.agentModel);
    if (later) {
      const answered = connection.written(requestId);
      void Promise.all([later, answered]).then(([update, written]) => {
        if (update && written) outbox.subscriber(client, session.id).send({ sessionUpdate: "config_option_update", configOptions: update });
      });
    }
    announceCommands(client, session.id, session.cwd, true);
    return options;
  };

  /** A command's reply: to the chat only, marked as the harness's own, stored nowhere. */
  const reply = (sub: Subscriber, text: string) => {
    if (text.length > 0) sub.send({ sessionUpdate: "agent_message_chunk", content: { type: "text", text }, _meta: { link: { reply: true } } });
  };

  const startTurn =
    (session: SessionState, settings: Settings | undefined, mcpServers = session.mcpServers): StartTurn =>
    async (message, steering, signal, listener) => {
      const toolServers = deps.discoverTools?.(settings?.tools, mcpServers) ?? [];
      let tools;
      try {
        if (toolServers.length > 0) tools = await deps.toolHost?.();
      } catch (e) {
        log.error("tool host unavailable: the turn runs without tools", { error: (e as Error).message });
      }
      // Written once the event loop comes round: by then the model's request is on its way, and (at
      // the turn's end) the prompt's response written, which the lines' writes to stderr went before.
      const soon = log.later ?? log;
      soon.info("turn", { thread: session.thread });
      const outcome = await deps.runTurn(
        {
          agent: deps.agent,
          thread: session.thread,
          ...(session.conversation !== undefined ? { conversation: session.conversation } : {}),
          ...(state.agentModel !== undefined ? { agentModel: state.agentModel } : {}),
          message,
          steering,
          signal,
          ...(tools ? { tools, toolServers } : {}),
          ...(settings ? { settings } : {}),
        },
        (report) => {
          if (report.type === "warning") log.warn("turn warning", { thread: session.thread, warning: report.message });
          if (report.type === "prompt_changed") state.promptChanged(session.thread, report.sections);
          listener(report);
        },
      );
      // A failed turn is logged as failed, with its reason, never as the end_turn the client is answered.
      if (outcome.failure) soon.warn("turn failed", { thread: session.thread, reason: outcome.failure.reason, failure: outcome.failure.message });
      else soon.info("turn ended", { thread: session.thread, stop: outcome.stop });
      return outcome;
    };

  const app = acp
    .agent({ name: "lnk-link-harness" })
    .onRequest(
      acp.methods.agent.initialize,
      guard(() => initializeResult(deps.version)),
    )
    .onRequest(
      acp.methods.agent.session.new,
      guard(async ({ params, client, requestId }) => {
        const link = parseLink(NewSessionLink, params._meta, served);
        checkServers(params.mcpServers);
        const session = sessions.create(connection, link, params.cwd, params.mcpServers);
        return { sessionId: session.id, configOptions: opened(client, session, requestId) };
      }),
    )
    .onRequest(
      acp.methods.agent.session.load,
      guard(async ({ params, client }) => {
        parseLink(SessionLink, params._meta, served);
        checkServers(params.mcpServers);
        const session = sessions.attach(connection, params.sessionId, params.cwd, params.mcpServers, { onDisk: true });
        const settings = state.settings();
        // session/load answers only once the whole conversation has been shown again; what a turn
        // of the session sends this connection meanwhile follows it. A turn that runs now is
        // followed from where it stands: the load shows the events before, the turn the rest.
        const release = outbox.hold(client, session.id);
        const conv = sessions.conversation(session.thread);
        const following = turns.follow(conv.dir, session.conversation, outbox.subscriber(client, session.id), () => {
          // One that can't be read is shown as far as it can be: its load says why.
          try {
            return lastEventNumber(conv);
          } catch {
            return Number.POSITIVE_INFINITY;
          }
        });
        let shown = false;
        try {
          await sessions.showAgain(
            session,
            (chosen) => chosen.verbosity ?? verbosityOf(settings),
            (update) => outbox.send(client, session.id, update),
            () => outbox.flushed(),
            following,
            // A turn of another process holds the chat's lock while it runs.
            () => {
              try {
                return lockedElsewhere(conv);
              } catch {
                return false;
              }
            },
          );
          announceCommands(client, session.id, session.cwd, false);
          following.loaded();
          shown = true;
        } catch (e) {
          following.stop();
          throw e;
        } finally {
          release(shown);
        }
        await outbox.flushed();
        return { configOptions: await configOptions(sessions, session, settings, state.agentModel) };
      }),
    )
    .onRequest(
      acp.methods.agent.session.resume,
      guard(async ({ params, client, requestId }) => {
        parseLink(SessionLink, params._meta, served);
        checkServers(params.mcpServers ?? []);
        const session = sessions.attach(connection, params.sessionId, params.cwd, params.mcpServers ?? []);
        return { configOptions: opened(client, session, requestId) };
      }),
    )
    .onRequest(
      acp.methods.agent.session.list,
      guard(({ params }) => {
        parseLink(SessionLink, params._meta, served);
        return sessions.list(connection, params.cursor, params.cwd ?? undefined);
      }),
    )
    .onRequest(
      acp.methods.agent.session.close,
      guard(({ params }) => {
        parseLink(SessionLink, params._meta, served);
        const named = sessions.resolve(params.sessionId);
        sessions.close(connection, params.sessionId);
        // Closing a session ends its work: its own running turn is stopped (never another session's),
        // and a group's turn its prompts wait on.
        turns.cancel(turnOf(named));
        stopGroupTurns(params.sessionId);
        return {};
      }),
    )
    .onRequest(
      acp.methods.agent.session.setConfigOption,
      guard(async ({ params }) => {
        parseLink(SessionLink, params._meta, served);
        const session = sessions.get(connection, params.sessionId);
        const settings = state.settings();
        await setModel(commandContext(session, settings), params.configId, params.value);
        return { configOptions: await configOptions(sessions, session, settings, state.agentModel) };
      }),
    )
    .onRequest(
      acp.methods.agent.session.prompt,
      guard(async ({ params, client, requestId }) => {
        const link = parseLink(PromptLink, params._meta, served);
        // The session as this connection holds it: its prompts run with the working folder and the
        // servers it opened the session with, whatever another connection opened it with.
        const arrived = sessions.get(connection, params.sessionId);
        // A group's message is its group's conversation's; one that was only a mention is ignored,
        // before its group's conversation is so much as opened: it makes no folder either.
        if (link.group !== undefined && onlyMention(params.prompt)) return { stopReason: "end_turn" } satisfies PromptResponse;
        const session = link.group !== undefined ? groupSession(sessions, connection, arrived, link.channel ?? arrived.channel, link.group) : arrived;
        const content = promptContent(params.prompt);
        const settings = state.settings();
        const channel = link.channel ?? session.channel;
        const message: IncomingMessage = {
          text: content.text,
          ...(content.parts.length ? { parts: content.parts } : {}),
          ...(link.from ? { from: link.from } : {}),
          ...(channel !== undefined ? { channel } : {}),
          ...(session.cwd !== undefined ? { cwd: session.cwd } : {}),
          ...(link.time ? { time: new Date(link.time) } : {}),
        };
        const key = turnOf(session);
        // Updates go to the session the message arrived on.
        const sub = outbox.subscriber(client, arrived.id);
        // The owner's command runs here and is answered by the harness, never sent to the model.
        const parsed = parseCommand(content.text, link.from);
        if (parsed) {
          const outcome = await runCommand(commandContext(session, settings, link.from, message.time), parsed);
          log.info("command", { thread: session.id, command: parsed.kind === "command" ? parsed.spec.name : parsed.kind, ...(outcome.refused ? { refused: true } : {}) });
          if (!outcome.message) {
            reply(sub, outcome.reply);
            await outbox.settled(arrived.id);
            return { stopReason: "end_turn" };
          }
          Object.assign(message, { text: outcome.message.text, ...(outcome.message.skill ? { skill: outcome.message.skill } : {}) });
        }
        // null: the conversation can't be read for one (its turn says why); no title is sent then.
        const titleNow = (): string | undefined | null => {
          try {
            return sessions.title(session.thread);
          } catch {
            return null;
          }
        };
        const untitled = titleNow() === undefined;
        // Owed until this prompt's answer has been written to the client (`_link/recover`).
        const debt = owe(sessions.conversation(session.thread), log);
        // A prompt no turn answered (it failed, or the process is stopping) owes nothing.
        let unanswered = false;
        // The request's own signal is not the turn's: a client that goes away leaves its turn to finish and be kept.
        const waited = session === arrived ? undefined : waitOn(arrived.id, key);
        try {
          // A turn's calls are named on from those the conversation showed before it, as a replay names them.
          const names = (after: number) =>
            sessions.callNames(session, after).catch((e: unknown) => {
              log.warn("the conversation's call names could not be read: this turn's calls are named as if it had none before", { thread: session.id, error: (e as Error).message });
              return new CallNames();
            });
          return promptResponse(await turns.prompt(key, message, verbosityOf(settings, link.verbosity), startTurn(session, settings, arrived.mcpServers), sub, debt, names));
        } catch (e) {
          unanswered = true;
          throw e;
        } finally {
          waited?.();
          // A conversation's first message gives it its title: the client is told, as session/list would.
          const title = untitled ? titleNow() : undefined;
          if (typeof title === "string") sub.send({ sessionUpdate: "session_info_update", title, updatedAt: new Date().toISOString() });
          // The turn's updates reach the client before its answer does, whatever the answer (after a
          // load of the session under way on this connection, which holds them back).
          await outbox.settled(arrived.id);
          debt.settle(unanswered ? Promise.resolve(true) : connection.written(requestId));
        }
      }),
    )
    .onRequest(
      ASP_EXPORT,
      z.unknown(),
      guard(({ params }) => aspExport(params, deps.agent, served, log)),
    )
    .onRequest(
      ASP_IMPORT,
      z.unknown(),
      guard(({ params }) => aspImport(params, deps.agent, served)),
    )
    // A method this agent doesn't serve, in plain words (the SDK's own quotes its words: "\"Method not found\": x").
    .onRequest("*", ({ method }) => {
      throw new acp.RequestError(METHOD_NOT_FOUND, `Method not found: ${method}`, { method });
    })
    .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
      // A cancel for another agent, or one that can't be read, stops nothing of this one's.
      try {
        parseLink(SessionLink, params._meta, served);
      } catch {
        return;
      }
      const named = sessions.named(params.sessionId);
      if (named) stopTurn(named);
      stopGroupTurns(params.sessionId);
    })
    .onRequest(
      OVERSIZED_METHOD,
      Oversized,
      guard(({ params }) => {
        throw acp.RequestError.invalidRequest(params, `the message of ${params.bytes} bytes is over this agent's limit of ${params.max}`);
      }),
    )
    .onRequest(
      TOO_DEEP_METHOD,
      TooDeep,
      guard(({ params }) => {
        throw acp.RequestError.invalidRequest(params, `the message nests arrays and objects deeper than this agent's limit of ${params.max}`);
      }),
    )
    .onRequest(
      NOT_TEXT_METHOD,
      NotText,
      guard(() => {
        throw acp.RequestError.invalidRequest(undefined, "the message is not UTF-8 text, the only encoding JSON-RPC over ACP is read in");
      }),
    );
  return withLinkMethods(app, { key: deps.key, agent: deps.agent, served, log }, connection);
}
