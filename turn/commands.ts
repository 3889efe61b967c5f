// Chat commands (spec: commands.txt): one declaration table of namespace commands, each with its
// arguments, who may run it, its handler, its help and the aliases that resolve to it. A command that
// changes what the conversation remembers or does next is kept as a command event; its reply goes to
// the chat only and is stored nowhere.
import { ConversationName, nearest, type Command, type Event, type From, type Settings, type Verbosity, VERBOSITIES } from "../protocol/index.js";
import { appendEvent, appendEventAfter, checkNoGap, lastEventNumber, listRepositorySkills, listSkills, paths, repositoryOf, readEventsFrom, readMark, readSkill, withConversationLock, writeMark, type AgentRef, type ConversationPaths, type Skill } from "../store/index.js";
import { chatMap, conversationEvents, FIRST, isBegin, sessionIdOf, splitSessionId, type ChatMap } from "./chat.js";
import { applyChoice, conversationChoices, resumeEvent, type Chosen } from "./history.js";
import type { IncomingMessage } from "./types.js";
import { isHighSurrogate } from "./wellformed.js";

/** Who may run a command: the owner alone (`_meta.link.from` left out, or `owner: true`). */
export type CommandWho = "owner";

export interface CommandContext {
  agent: AgentRef;
  /** The chat (the session's thread). */
  thread: string;
  /** The conversation the session names (`<thread>~<name>`); left out, the chat's current one. */
  conversation?: string;
  settings: Settings | undefined;
  from?: From;
  time: Date;
  /** The session's working folder: the skills of the repository it is in are reached by /skill:<name>. */
  cwd?: string;
  /** /stop: ends the conversation's running turn; false when none runs. */
  stop(): boolean;
  /** The agent's model as `/model:set --agent` set it in this process (until the agent starts again). */
  agentModel: { get(): string | undefined; set(model: string | undefined): void };
  /** /status: what the conversation is and holds now, in lines. */
  status(): Promise<string[]>;
}

export interface CommandOutcome {
  /** What the chat is told: the harness's words, never the model's, stored nowhere. */
  reply: string;
  /** /skill: the message a turn answers now. */
  message?: IncomingMessage;
  /** A conversation a command began or went back to, with its session id. */
  began?: { sessionId: string; conversation: string };
  /** The command was refused: nothing was done, and the reply says why. */
  refused?: boolean;
}

export interface CommandSpec {
  /** Its namespace name, typed after `/`. */
  name: string;
  /** Its arguments, as an input hint; left out, it takes none. */
  args?: string;
  who: CommandWho;
  help: string;
  /** The familiar spellings of other harnesses that resolve to it. */
  aliases: readonly string[];
  run(ctx: CommandContext, args: string, typed: string): Promise<CommandOutcome>;
}

/** The most a command's arguments may be: a model or conversation name, a skill's request is the exception. */
const ARGS_MAX = 256;

class CommandRefused extends Error {}

/** A reply that refuses: the command did nothing, and says why. */
function refuse(message: string): never {
  throw new CommandRefused(message);
}

function noArgs(name: string, args: string): void {
  if (args.length > 0) refuse(`/${name} takes no arguments (nothing was done). Send it alone.`);
}

function conversationOf(ctx: CommandContext): ConversationPaths {
  return paths(ctx.agent).conversation(ctx.thread);
}

function commandEvent(ctx: CommandContext, name: Command["name"], typed: string, fields: Partial<Command> = {}): Command {
  return { v: 1, kind: "command", name, time: ctx.time.toISOString(), ...(typed ? { text: typed } : {}), ...fields, ...(ctx.from ? { from: ctx.from } : {}) };
}

/** The chat's conversations as its log says now. */
function readChat(conv: ConversationPaths): { map: ChatMap; last: number } {
  const all = readEventsFrom(conv, 1);
  return { map: chatMap(all), last: all.at(-1)?.n ?? lastEventNumber(conv) };
}

/**
 * Writes a command that says which conversation the events after it belong to. Held under the
 * conversation's lock, so it lands between turns, never inside one; the session's own conversation
 * is made current first, as a prompt of that session would.
 */
async function writeBegin(
  ctx: CommandContext,
  make: (map: ChatMap, last: number) => Command,
  /** What refuses the command before the session's resume is written: `make` itself, as the chat will be once it is. */
  check: (map: ChatMap, last: number) => unknown = make,
): Promise<{ n: number; event: Command }> {
  const conv = conversationOf(ctx);
  return withConversationLock(conv, async () => {
    // Nothing is written past a number missing, where no reader looks (EventGapError): the first one
    // too, where what was read (nothing) says nothing of what is on disk.
    checkNoGap(conv);
    let { map, last } = readChat(conv);
    const resume = ctx.conversation !== undefined ? resumeEvent(conv, ctx.conversation, map, ctx.time) : undefined;
    if (resume) {
      // Checked first as it will be once its conversation is current: a command refused writes nothing, not even that.
      check({ ...map, current: ctx.conversation as string }, last + 1);
      last = await appendEvent(conv, resume);
      ({ map } = readChat(conv));
    }
    const event = make(map, last);
    const n = await appendEvent(conv, event);
    // The window's mark says the chat holds several conversations now, so a listing shows each.
    const mark = readMark(conv);
    if (event.conversation !== undefined && mark && mark.conversation !== event.conversation) writeMark(conv, { ...mark, conversation: event.conversation });
    return { n, event };
  });
}

/** `name`, or, when the chat has a conversation of that name already (one named so by hand), `name-2`, `name-3`…: one it has not. */
function freeName(map: ChatMap, name: string): string {
  let free = name;
  for (let k = 2; map.conversations.has(free); k++) free = `${name}-${k}`;
  return free;
}

/** A conversation named in an argument: a name of this chat, or a session id of it (`<thread>~<name>`). */
function conversationName(ctx: CommandContext, arg: string): string {
  const { thread, conversation } = splitSessionId(arg);
  if (conversation !== undefined) {
    if (thread !== ctx.thread) refuse(`${arg} is a conversation of another chat: a fork or a resume stays within this chat (${ctx.thread}).`);
    return conversation;
  }
  return arg;
}

function known(map: ChatMap, name: string): void {
  if (map.conversations.has(name)) return;
  const near = nearest(name, map.conversations.keys());
  refuse(`This chat has no conversation ${JSON.stringify(name)}${near.length ? `: did you mean ${near.join(" or ")}?` : "."} It has: ${[...map.conversations.keys()].join(", ")}.`);
}

/**
 * A URL (`scheme://`), or a user and password before a host (`user:password@host`): the endpoint's,
 * never a model's name. Kept, it would be sent as the model's name and written in the command's
 * event and every later answer's; a name such as Vertex's `claude-sonnet-4@20250514` still passes.
 */
const NOT_A_MODEL = /:\/\/|:[^\s@]*@/;

/**
 * What no model's name holds: a space, a control character, a format character (a bidirectional
 * control, a zero-width one, which would make the name read other than it is wherever it is shown),
 * half of a UTF-16 pair, or U+FFFD, which such a half of a prompt's text is read as: no provider
 * names a model so, and the name would be kept and sent at each turn.
 */
const NOT_IN_A_NAME = /[\s\p{Cc}\p{Cf}\p{Cs}\uFFFD]/u;

/** What a reply can't show as it is: a control or format character (a bidirectional control, a zero-width one), half of a UTF-16 pair, a line or paragraph separator. */
const UNSHOWN = /[\p{Cc}\p{Cf}\p{Cs}\u2028\u2029]/gu;

/** The first `max` code units of what was typed, less the first half of a pair the cut would part from its second. */
function cut(text: string, max: number): string {
  return text.length > max && isHighSurrogate(text.charCodeAt(max - 1)) ? text.slice(0, max - 1) : text.slice(0, max);
}

/**
 * What was typed, repeated in a reply: bounded, quoted, each character that can't be shown as it is
 * written as an escape, so the reply reads as what was typed and nothing in it turns the chat's text
 * around or hides part of it.
 */
function quoted(text: string, max: number): string {
  // JSON.stringify escapes C0 controls, quotes and lone halves; what it leaves as it is is escaped here.
  return JSON.stringify(cut(text, max)).replace(UNSHOWN, (c) => `\\u{${(c.codePointAt(0) ?? 0).toString(16)}}`);
}

/** A model's name as typed: one word, printable, bounded, no URL; refused without repeating what may be a password. */
function checkModelName(model: string): void {
  if (NOT_A_MODEL.test(model)) {
    refuse("That is a URL, or a user and password before a host (user:password@host), not a model's name: it is not repeated here, kept or sent (nothing was done). The endpoint is the settings' model.base_url; /model:set takes a name such as gpt-5.");
  }
  if (model.length > ARGS_MAX || NOT_IN_A_NAME.test(model)) {
    refuse(`${quoted(model, 80)} is not a model's name: one printable word, at most ${ARGS_MAX} characters (nothing was done).`);
  }
}

/** Providers whose own model names say which provider made the model (`anthropic/claude-…`). */
const ROUTERS = new Set(["openrouter", "litellm", "together", "requesty", "aihubmix", "vercel", "cloudflare", "nebius"]);
/** Providers Link knows by name: `<provider>/<model>` of one of these is a model of that provider. */
const PROVIDERS = new Set([
  "openai",
  "anthropic",
  "google",
  "gemini",
  "vertex",
  "mistral",
  "deepseek",
  "groq",
  "xai",
  "ollama",
  "openrouter",
  "together",
  "fireworks",
  "perplexity",
  "cohere",
  "qwen",
  "moonshot",
  "zai",
  "minimax",
  "bedrock",
  "azure",
  "lmstudio",
  "vllm",
  "llamacpp",
  "litellm",
]);

/**
 * The model as this provider names it: `<provider>/<model>` of the agent's own provider is `<model>`;
 * of another provider Link knows, refused (its key and proxy are set when the agent starts), unless
 * the agent's provider routes to other providers' models by such names.
 */
export function modelWithinProvider(provider: string, model: string): string {
  const slash = model.indexOf("/");
  if (slash <= 0) return model;
  const named = model.slice(0, slash).toLowerCase();
  const own = provider.toLowerCase();
  if (named === own) return model.slice(slash + 1);
  if (PROVIDERS.has(named) && !ROUTERS.has(own)) {
    refuse(
      `${model} is a model of ${named}, and this agent's provider is ${provider}: a switch stays within the provider, whose key and proxy were set when the agent started. Switch the agent's provider in Link, which starts it again (nothing was done).`,
    );
  }
  return model;
}

/** Sets or clears the conversation's model: the one code path of `/model:set` and the ACP `model` option. */
export async function setConversationModel(ctx: CommandContext, model: string | undefined, typed: string): Promise<CommandOutcome> {
  try {
    return await writeModel(ctx, model, typed);
  } catch (e) {
    if (e instanceof CommandRefused) return { reply: e.message, refused: true };
    throw e;
  }
}

/**
 * Writes a choice of the conversation's (its model, its chat's verbosity). A session that names a
 * conversation of its chat (`<thread>~<name>`) chooses for that one: when it is the chat's current
 * one, the choice is written at once, right after what was read or after events written since
 * that begin no other conversation; when another is current, or became so meanwhile (a turn of
 * another session resumed it), its own is made current first, under the lock, as a prompt of it
 * would. Else the choice is written at once, with no lock: it never waits for a running turn.
 */
async function writeChoice(ctx: CommandContext, event: Command): Promise<void> {
  const conv = conversationOf(ctx);
  const own = ctx.conversation;
  if (own === undefined) {
    // Not past a number missing, where no reader looks (EventGapError).
    checkNoGap(conv);
    await appendEvent(conv, event);
    return;
  }
  const { map, last } = readChat(conv);
  const keepsOwn = (e: Event): boolean => !isBegin(e) || e.conversation === own;
  // Written after the events read only when they are all there are: one after a number missing
  // (removed by hand) would fill the hole and bring back what readers leave out, and events written
  // since are read under the lock.
  if (map.current === own && lastEventNumber(conv) === last && (await appendEventAfter(conv, event, last, keepsOwn)) !== undefined) return;
  await writeBegin(ctx, () => event);
}

/** The choices of the session's conversation: the one it names, else the chat's current one. */
function sessionChoices(ctx: CommandContext): Chosen {
  const conv = conversationOf(ctx);
  if (ctx.conversation === undefined) return conversationChoices(conv);
  return conversationEvents(readChat(conv).map, ctx.conversation).reduce<Chosen>((c, e) => applyChoice(e.event, c), {});
}

async function writeModel(ctx: CommandContext, model: string | undefined, typed: string): Promise<CommandOutcome> {
  const settings = ctx.settings;
  if (model === undefined) {
    await writeChoice(ctx, commandEvent(ctx, "/model:set", typed));
    const agents = ctx.agentModel.get() ?? settings?.model.name;
    return { reply: `This conversation runs on the agent's model again${agents ? ` (${agents})` : ""}.` };
  }
  checkModelName(model);
  const name = settings ? modelWithinProvider(settings.model.provider, model) : model;
  if (name.length === 0) refuse("/model:set: the model's name is empty (nothing was done).");
  await writeChoice(ctx, commandEvent(ctx, "/model:set", typed, { model: name }));
  return { reply: `This conversation now runs on ${name}${settings ? ` (${settings.model.provider})` : ""}; the agent's other conversations keep theirs.` };
}

async function modelSet(ctx: CommandContext, args: string, typed: string): Promise<CommandOutcome> {
  const words = args.split(/\s+/).filter(Boolean);
  if (words[0] === "--agent") {
    if (words.length > 2) refuse("/model:set --agent takes one model, or none to go back to the one the agent started with (nothing was done).");
    const model = words[1];
    const started = ctx.settings?.model.name;
    if (model === undefined) {
      ctx.agentModel.set(undefined);
      return { reply: `The agent runs on the model it started with again${started ? ` (${started})` : ""}, for every conversation that chose none.` };
    }
    checkModelName(model);
    const name = ctx.settings ? modelWithinProvider(ctx.settings.model.provider, model) : model;
    ctx.agentModel.set(name);
    return {
      reply: `The agent now runs on ${name} for every conversation that chose none, until it starts again: Link names its model at each start, and the settings are not changed.`,
    };
  }
  if (words.length > 1) refuse(`/model:set takes one model's name, not ${words.length} words (nothing was done).`);
  return setConversationModel(ctx, words[0], typed);
}

function verbosityOf(word: string): Verbosity | undefined {
  const lower = word.toLowerCase();
  if ((VERBOSITIES as readonly string[]).includes(lower)) return lower as Verbosity;
  if (lower === "on") return "all";
  return undefined;
}

/** The values of Link's [connections] activity: the bridge shows or hides each tool call by the one it carries. */
const VERBOSITY_HELP = "off, new, all (or on) or verbose, as Link's [connections] activity names them";

async function verbositySet(ctx: CommandContext, args: string, typed: string): Promise<CommandOutcome> {
  if (args.length === 0) {
    const now = sessionChoices(ctx).verbosity ?? ctx.settings?.verbosity ?? "new";
    return { reply: `This chat's verbosity is ${now}. Set it with /verbosity:set followed by one of: ${VERBOSITY_HELP}.` };
  }
  const verbosity = verbosityOf(args.trim());
  if (!verbosity) refuse(`/verbosity:set: ${JSON.stringify(args.slice(0, 40))} is not a verbosity; one of: ${VERBOSITY_HELP} (nothing was done).`);
  await writeChoice(ctx, commandEvent(ctx, "/verbosity:set", typed, { verbosity }));
  return { reply: `This chat's verbosity is now ${verbosity}: every tool call it is shown says so.` };
}

async function newConversation(ctx: CommandContext, args: string, typed: string): Promise<CommandOutcome> {
  noArgs("new", args);
  await writeBegin(ctx, () => commandEvent(ctx, "/new", typed));
  return { reply: "Started anew: the model is no longer sent what came before. It stays on disk, in the chat's transcript.md." };
}

async function chatCreate(ctx: CommandContext, args: string, typed: string): Promise<CommandOutcome> {
  if (args.length > 0 && !ConversationName.safeParse(args).success) {
    refuse(`/chat:create: ${JSON.stringify(args.slice(0, 80))} is not a conversation name: letters, digits, '.', '_' or '-', at most 64 (nothing was done).`);
  }
  const { event } = await writeBegin(ctx, (map, last) => {
    const name = args || freeName(map, `chat-${last + 1}`);
    if (map.conversations.has(name)) refuse(`This chat has a conversation ${name} already: /chat:resume ${name} goes back to it (nothing was done).`);
    return commandEvent(ctx, "/chat:create", typed, { conversation: name });
  });
  const name = event.conversation ?? FIRST;
  return {
    reply: `Began the conversation ${name}, with nothing of before (session ${sessionIdOf(ctx.thread, name)}). /chat:resume ${ctx.conversation ?? "main"} goes back.`,
    began: { sessionId: sessionIdOf(ctx.thread, name), conversation: name },
  };
}

async function chatFork(ctx: CommandContext, args: string, typed: string): Promise<CommandOutcome> {
  if (/\s/.test(args)) refuse("/chat:fork takes one argument, a conversation and, after an @, the event to fork at (nothing was done).");
  const at = args.lastIndexOf("@");
  const sourceArg = at >= 0 ? args.slice(0, at) : args;
  const eventArg = at >= 0 ? args.slice(at + 1) : undefined;
  if (eventArg !== undefined && !/^[1-9]\d{0,11}$/.test(eventArg)) refuse(`/chat:fork: ${JSON.stringify(eventArg.slice(0, 20))} is not an event's number (nothing was done).`);
  const { event, n } = await writeBegin(ctx, (map, last) => {
    const source = sourceArg ? conversationName(ctx, sourceArg) : map.current;
    known(map, source);
    const events = conversationEvents(map, source);
    const point = eventArg !== undefined ? Number(eventArg) : events.at(-1)?.n;
    if (point === undefined) refuse(`The conversation ${source} has no event yet to fork at (nothing was done).`);
    if (point > last) refuse(`/chat:fork: the chat's log ends at event ${last}; ${point} is past it (nothing was done).`);
    if (!events.some((e) => e.n <= point)) refuse(`The conversation ${source} has no event at or before ${point} (nothing was done).`);
    return commandEvent(ctx, "/chat:fork", typed, { conversation: freeName(map, `fork-${last + 1}`), thread: source, event: point });
  });
  const name = event.conversation ?? `fork-${n}`;
  return {
    reply: `Forked ${event.thread ?? ""} at event ${event.event ?? ""} as the conversation ${name} (session ${sessionIdOf(ctx.thread, name)}): it shares what came before, nothing copied. /chat:resume ${event.thread ?? "main"} goes back.`,
    began: { sessionId: sessionIdOf(ctx.thread, name), conversation: name },
  };
}

async function chatResume(ctx: CommandContext, args: string, typed: string): Promise<CommandOutcome> {
  if (args.length === 0) refuse("/chat:resume needs the conversation to go back to: /chat:resume <name> (nothing was done).");
  if (/\s/.test(args)) refuse("/chat:resume takes one conversation's name (nothing was done).");
  const name = conversationName(ctx, args);
  let already = false;
  await writeBegin(
    ctx,
    (map) => {
      known(map, name);
      if (map.current === name) {
        already = true;
        refuse("");
      }
      return commandEvent(ctx, "/chat:resume", typed, { conversation: name });
    },
    // Before the session's own resume, only that the chat has the conversation: the one asked for may be the session's.
    (map) => known(map, name),
  ).catch((e: unknown) => {
    if (!(already && e instanceof CommandRefused)) throw e;
  });
  if (already) return { reply: `The conversation ${name} is the current one already.` };
  return { reply: `Back in the conversation ${name} (session ${sessionIdOf(ctx.thread, name)}).`, began: { sessionId: sessionIdOf(ctx.thread, name), conversation: name } };
}

async function stop(ctx: CommandContext, args: string, typed: string): Promise<CommandOutcome> {
  noArgs("stop", args);
  if (!ctx.stop()) return { reply: "Nothing is running to stop." };
  await appendEvent(conversationOf(ctx), commandEvent(ctx, "/stop", typed));
  return { reply: "Stopped the running turn: what it wrote stays." };
}

function helpText(): string {
  const lines = ["Commands (the owner's alone; anyone else's go to the agent as their words):"];
  for (const spec of COMMANDS) {
    lines.push(`/${spec.name}${spec.args ? ` ${spec.args}` : ""} — ${spec.help}${spec.aliases.length ? ` (also ${spec.aliases.map((a) => `/${a}`).join(", ")})` : ""}`);
  }
  lines.push("/skill:<name> [text] — asks the agent to use one of its skills (/<skill> alone, when no command has its name)");
  lines.push("A message starting with // or with / then a space is not a command.");
  return lines.join("\n");
}

/** The namespace commands: one table, every spelling resolving here. */
export const COMMANDS: readonly CommandSpec[] = [
  {
    name: "new",
    who: "owner",
    help: "starts the conversation anew: the model is no longer sent what came before, which stays on disk",
    aliases: ["reset", "clear"],
    run: newConversation,
  },
  {
    name: "model:set",
    args: "[<model>] | --agent [<model>]",
    who: "owner",
    help: "this conversation's model, within the agent's provider; alone, back to the agent's. --agent: the agent's, until it starts again",
    aliases: ["model"],
    run: modelSet,
  },
  { name: "chat:create", args: "[<name>]", who: "owner", help: "begins another conversation in this chat, with nothing of before", aliases: [], run: chatCreate },
  {
    name: "chat:fork",
    args: "[<conversation>[@<event>]]",
    who: "owner",
    help: "a new conversation sharing a conversation's events up to one (left out: this one, to its last)",
    aliases: ["fork", "branch"],
    run: chatFork,
  },
  { name: "chat:resume", args: "<conversation>", who: "owner", help: "goes back to a conversation of this chat", aliases: ["resume"], run: chatResume },
  { name: "stop", who: "owner", help: "stops the running turn, as a client's cancel does", aliases: ["cancel", "abort"], run: stop },
  {
    name: "verbosity:set",
    args: "[off|new|all|verbose]",
    who: "owner",
    help: "how much of its tool calls this chat is shown; alone, says which",
    aliases: ["verbose", "verbosity"],
    run: verbositySet,
  },
  { name: "help", who: "owner", help: "lists the commands and their aliases", aliases: ["commands", "?"], run: () => Promise.resolve({ reply: helpText() }) },
  {
    name: "status",
    who: "owner",
    help: "the conversation's model, provider, window, last turn's tokens and tools",
    aliases: ["usage", "context"],
    run: async (ctx, args) => {
      noArgs("status", args);
      return { reply: (await ctx.status()).join("\n") };
    },
  },
];

/**
 * Spellings of other harnesses not mapped, and why (man: lnk-link-harness-acp(7)): /compact (the
 * window drops its oldest turns itself), /undo and /rewind (events are never rewritten: /chat:fork at
 * an earlier event instead), /exit and /quit (the client's, not the chat's), /think (a model's
 * params are its settings').
 */
export const NOT_MAPPED = ["compact", "undo", "rewind", "exit", "quit", "think"] as const;

const BY_NAME = new Map<string, CommandSpec>();
for (const spec of COMMANDS) {
  BY_NAME.set(spec.name, spec);
  for (const alias of spec.aliases) BY_NAME.set(alias, spec);
}

/** What a message that starts with `/` asks for. */
export type Parsed =
  | { kind: "command"; spec: CommandSpec; typed: string; name: string; args: string }
  | { kind: "skill"; name: string; args: string; typed: string }
  | { kind: "unknown"; name: string; typed: string };

const COMMAND_LINE = /^\/([^\s/]+)(?:\s+([\s\S]*))?$/u;

/**
 * Reads a message as a command: only the owner's (`from` left out, or `owner: true`), only one that
 * starts with `/` and a name (`//x`, `/ x`, `/` alone and a path such as `/usr/bin` are messages).
 * Undefined: not a command, the message goes to the model as it is.
 */
export function parseCommand(text: string, from: From | undefined): Parsed | undefined {
  if (from !== undefined && !from.owner) return undefined;
  const m = COMMAND_LINE.exec(text);
  if (!m?.[1]) return undefined;
  const word = m[1];
  const args = (m[2] ?? "").trim();
  // What is kept of it (the command's event, a skill's message): as typed, less the whitespace around
  // its arguments, which no bound on them counts (megabytes of spaces after a model's name).
  const typed = args ? `/${word} ${args}` : `/${word}`;
  const lower = word.toLowerCase();
  if (lower.startsWith("skill:")) return { kind: "skill", name: word.slice("skill:".length), args, typed };
  const spec = BY_NAME.get(lower);
  if (spec) return { kind: "command", spec, typed, name: lower, args };
  return { kind: "unknown", name: word, typed };
}

/** The agent's own skill of a name (its folder's or its SKILL.md's). */
function ownSkill(skills: readonly Skill[], name: string): Skill | undefined {
  const lower = name.toLowerCase();
  return skills.find((s) => s.folder.toLowerCase() === lower) ?? skills.find((s) => s.name.toLowerCase() === lower);
}

function skillMessage(ctx: CommandContext, skill: Skill, typed: string): CommandOutcome {
  const text = readSkill(ctx.agent, skill);
  if (text === undefined) refuse(`The skill ${skill.name} has no SKILL.md to read (nothing was done).`);
  return {
    reply: "",
    message: { text: typed, skill: { name: skill.name, path: skill.path, text } },
  };
}

/**
 * Runs a parsed command. An agent's own skill of the command's name (as typed) runs instead of it; a
 * refused or unknown command replies why and writes nothing.
 */
export async function runCommand(ctx: CommandContext, parsed: Parsed): Promise<CommandOutcome> {
  try {
    if (parsed.kind === "skill") {
      // The agent's own first, then the repository's the session works in.
      const root = repositoryOf(ctx.cwd ?? paths(ctx.agent).files);
      const own = listSkills(ctx.agent, ctx.settings);
      const repository = root !== undefined ? listRepositorySkills(root) : [];
      const skills = [...own, ...repository];
      // By its folder's name or its own: one of the agent's before any of the repository's.
      const skill = ownSkill(own, parsed.name) ?? ownSkill(repository, parsed.name);
      if (!skill) {
        const near = nearest(parsed.name, skills.flatMap((s) => [s.folder, s.name]));
        refuse(
          `The agent has no skill ${quoted(parsed.name, 80)}${near.length ? `: did you mean ${near.map((n) => `/skill:${n}`).join(" or ")}?` : "."}${skills.length ? ` Its skills: ${skills.map((s) => s.folder).join(", ")}.` : " It has none."}`,
        );
      }
      return skillMessage(ctx, skill, parsed.typed);
    }
    const typedName = parsed.kind === "command" ? parsed.name : parsed.name.toLowerCase();
    // One of the agent's own skills may take a command's name (spec: commands.txt).
    // A skills folder that can't be read (a SKILL.md that is a link, say) shadows nothing: /stop still stops.
    let shadow: Skill | undefined;
    try {
      shadow = ownSkill(listSkills(ctx.agent, ctx.settings), typedName);
    } catch {
      shadow = undefined;
    }
    if (shadow && (shadow.folder.toLowerCase() === typedName || shadow.name.toLowerCase() === typedName)) return skillMessage(ctx, shadow, parsed.typed);
    if (parsed.kind === "unknown") {
      const near = nearest(typedName, BY_NAME.keys());
      // Repeated as typed when every character of it can be shown, else quoted with escapes as a refused
      // model's name is: a bidirectional control would turn the rest of the reply around.
      const name = `/${cut(parsed.name, 64)}`;
      const shown = name.search(UNSHOWN) < 0 ? name : quoted(name, name.length);
      refuse(
        `${shown} is not a command${near.length ? `: did you mean ${near.map((n) => `/${n}`).join(" or ")}?` : "."} /help lists them. (Not sent to the agent; start with // to send it.)`,
      );
    }
    if (parsed.args.length > ARGS_MAX) refuse(`/${parsed.spec.name}: its arguments are over ${ARGS_MAX} characters (nothing was done).`);
    return await parsed.spec.run(ctx, parsed.args, parsed.typed);
  } catch (e) {
    if (e instanceof CommandRefused) return { reply: e.message, refused: true };
    throw e;
  }
}
