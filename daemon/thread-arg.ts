// A THREAD named on the command line: a valid name, of a conversation the agent has (or, where a
// session id may be given, one conversation of a chat).
import { existsSync } from "node:fs";
import { join } from "node:path";
import { ConversationName, Thread } from "../protocol/index.js";
import { InvalidNameError, checkThread, paths, type AgentRef, type ConversationPaths } from "../store/index.js";
import { splitSessionId } from "../turn/chat.js";
import { UsageError } from "./cli.js";

/** The conversation THREAD names; a name that is not one, or of no conversation, is a usage error. */
export function namedConversation(agent: AgentRef, thread: string): ConversationPaths {
  try {
    checkThread(thread);
  } catch (e) {
    if (e instanceof InvalidNameError) throw new UsageError(e.message);
    throw e;
  }
  const conv = paths(agent).conversation(thread);
  if (!existsSync(conv.dir)) throw new UsageError(`no conversation ${JSON.stringify(thread)} in ${paths(agent).chats}`);
  return conv;
}

/** A conversation named on the command line: a chat's folder, or one conversation of a chat. */
export interface NamedSession {
  /** The chat's thread: its folder's name. */
  thread: string;
  /** `<thread>~<name>`: the conversation of the chat it names. */
  conversation?: string;
  conv: ConversationPaths;
}

/**
 * What THREAD names, as a session id does (turn/chat.ts): a chat's folder when there is one of that
 * name, else `<thread>~<name>`, one conversation of the chat `<thread>` (whether the chat holds it is
 * found when it is read). A name that is neither is a usage error.
 */
export function namedSession(agent: AgentRef, arg: string): NamedSession {
  const p = paths(agent);
  if (Thread.safeParse(arg).success && existsSync(join(p.chats, arg))) return { thread: arg, conv: p.conversation(arg) };
  const { thread, conversation } = splitSessionId(arg);
  if (conversation !== undefined && Thread.safeParse(thread).success && existsSync(join(p.chats, thread))) {
    if (!ConversationName.safeParse(conversation).success) throw new UsageError(`invalid conversation name ${JSON.stringify(conversation.slice(0, 80))} after "~" in ${JSON.stringify(arg.slice(0, 80))}`);
    return { thread, conversation, conv: p.conversation(thread) };
  }
  return { thread: arg, conv: namedConversation(agent, arg) };
}
