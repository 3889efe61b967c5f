// A THREAD named on the command line: a valid name, of a conversation the agent has.
import { existsSync } from "node:fs";
import { InvalidNameError, checkThread, paths, type AgentRef, type ConversationPaths } from "../store/index.js";
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
