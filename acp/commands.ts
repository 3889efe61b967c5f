// The commands a client offers (available_commands_update): the namespace commands with their input
// hints, and each of the agent's skills as /skill:<name>.
import type { AvailableCommand } from "@agentclientprotocol/sdk";
import { listSkills, type AgentRef } from "../store/index.js";
import { COMMANDS } from "../turn/commands.js";
import type { Logger } from "./deps.js";

/** The most skills offered by name: a client's menu, not a listing of everything. */
const SKILLS_OFFERED = 64;

export function availableCommands(agent: AgentRef, log: Logger): AvailableCommand[] {
  const commands: AvailableCommand[] = COMMANDS.map((spec) => ({
    name: spec.name,
    description: spec.aliases.length ? `${spec.help} (also ${spec.aliases.map((a) => `/${a}`).join(", ")})` : spec.help,
    ...(spec.args ? { input: { hint: spec.args } } : {}),
  }));
  try {
    for (const skill of listSkills(agent).slice(0, SKILLS_OFFERED)) {
      commands.push({ name: `skill:${skill.folder}`, description: skill.description || `the skill ${skill.name}`, input: { hint: "what to use it for" } });
    }
  } catch (e) {
    // The commands are still offered; the skills' folder says what is wrong at the next turn.
    log.warn("the agent's skills could not be listed", { error: (e as Error).message });
  }
  return commands;
}
