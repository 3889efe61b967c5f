// `lnk-link-harness instructions`: the system prompt a turn would send now, section by section, each
// with its owner, its size and its limit (the contract's `prompt`). Loaded only for this command.
import { existsSync } from "node:fs";
import { readSettings, readToolsList } from "../store/index.js";
import { SECTION_DEFAULTS, composeSections } from "../turn/sections.js";
import { TOOL_SEPARATOR } from "../turn/tools.js";
import { UsageError, agentRef, type AgentOptions } from "./cli.js";
import { namedConversation } from "./thread-arg.js";
import { discoverTools } from "./tools/discover.js";

/**
 * The tools a turn would offer, by name: those the environment (LNK_MEMORY, LNK_TOOL_*) and the
 * settings name, none started; a conversation's tools.json narrows them as a turn's list does.
 */
function toolNames(settingsTools: Record<string, string> | undefined, allowed: readonly string[] | undefined): string[] {
  const names = discoverTools(process.env, settingsTools ? { settings: settingsTools } : {}).map((t) => t.name);
  if (!allowed) return names;
  return names.filter((n) => allowed.some((a) => a === n || a.startsWith(`${n}${TOOL_SEPARATOR}`)));
}

export function instructionsReport(o: AgentOptions, thread: string | undefined): string {
  const agent = agentRef(o);
  if (!existsSync(o.agent)) throw new UsageError(`no agent folder at ${o.agent}`);
  const settings = readSettings(agent);
  if (!settings) throw new UsageError(`the agent has no settings: run lnk-link-harness configure --agent ${o.agent}`);
  let allowed: string[] | undefined;
  if (thread !== undefined) {
    allowed = readToolsList(namedConversation(agent, thread));
  }
  const tools = toolNames(settings.tools, allowed).map((tool) => ({ tool }));
  const sections = composeSections(agent, settings, tools);
  const total = sections.reduce((n, s, i) => n + s.text.length + (i > 0 ? 2 : 0), 0);
  const out = [`The system prompt a turn${thread !== undefined ? ` of ${thread}` : ""} would send now: ${sections.length} sections, ${total} characters`];
  for (const s of sections) {
    const max = settings.instructions?.[s.name]?.max ?? SECTION_DEFAULTS[s.name].max;
    out.push("", `--- ${s.name}: owner ${s.owner}, ${s.text.length} of at most ${max} characters${/\n\[cut: \d+ more characters\]$/.test(s.text) ? " (cut)" : ""}`, s.text);
  }
  return `${out.join("\n")}\n`;
}
