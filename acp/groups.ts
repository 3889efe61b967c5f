// Groups (spec: "How does Link Harness answer in a group?"): each group is a conversation of its own,
// `<channel>-<group id>`, whatever session a message of it arrives on; a message that was only a
// mention of the agent, empty once Link's bridge has cut the mention out, is ignored.
import type { ContentBlock } from "@agentclientprotocol/sdk";
import { isThread } from "../store/index.js";
import { ParamsError } from "./meta.js";
import type { Opener, Sessions, SessionState } from "./sessions.js";

/**
 * The conversation of a group: `<channel>-<group>`, a thread name like any other. Its channel holds
 * no `-`, so no two groups share one (`team-a` and `42`, `team` and `a-42`), and neither holds `~`,
 * which names a conversation of a chat in a session's id (`slack-g~side` is chat `slack-g`'s).
 */
export function groupThread(channel: string | undefined, group: string): string {
  if (channel === undefined) throw new ParamsError("_meta.link: group: a group needs its channel");
  if (channel.includes("-")) throw new ParamsError(`_meta.link: channel: a group's channel holds no "-", which parts it from the group's id in its conversation's name`);
  if (channel.includes("~") || group.includes("~")) throw new ParamsError(`_meta.link: group: a group's channel and id hold no "~", which names a conversation of a chat`);
  const thread = `${channel}-${group}`;
  if (!isThread(thread)) throw new ParamsError(`_meta.link: group: ${JSON.stringify(thread.slice(0, 80))} is not a usable thread name`);
  return thread;
}

/**
 * The session a group's message is answered in: the group's conversation, taken up if it exists
 * (by this process or any other), else made, with the working folder and tools of the session the
 * message arrived on, as the connection it arrived on holds it.
 */
export function groupSession(sessions: Sessions, opener: Opener, arrived: SessionState, channel: string | undefined, group: string): SessionState {
  const thread = groupThread(channel, group);
  if (thread === arrived.thread) return arrived;
  const cwd = arrived.cwd ?? sessions.agent.dir;
  if (sessions.exists(thread)) return sessions.attach(opener, thread, cwd, arrived.mcpServers);
  return sessions.create(opener, { channel, group }, cwd, arrived.mcpServers);
}

/** Whether a group's message holds nothing once the mention was cut: only empty or blank text. */
export function onlyMention(blocks: readonly ContentBlock[]): boolean {
  return blocks.every((b) => b.type === "text" && b.text.trim() === "");
}
