// The commands a client offers (available_commands_update): the namespace commands with their input
// hints, and each skill as /skill:<name>: the agent's own, then the repository's the session works in.
import type { AvailableCommand } from "@agentclientprotocol/sdk";
import type { Settings } from "../protocol/index.js";
import { listRepositorySkills, listSkills, paths, repositoryOf, type AgentRef } from "../store/index.js";
import { COMMANDS } from "../turn/commands.js";
import type { Logger } from "./deps.js";

/** The most skills offered by name: a client's menu, not a listing of everything. */
const SKILLS_OFFERED = 64;

/** The commands offered; the identity's skills named by `settings` when they are held in memory (a Bind's), else by config.json. */
export function availableCommands(agent: AgentRef, cwd: string | undefined, log: Logger, settings?: Settings): AvailableCommand[] {
  const commands: AvailableCommand[] = COMMANDS.map((spec) => ({
    name: spec.name,
    description: spec.aliases.length ? `${spec.help} (also ${spec.aliases.map((a) => `/${a}`).join(", ")})` : spec.help,
    ...(spec.args ? { input: { hint: spec.args } } : {}),
  }));
  try {
    const root = repositoryOf(cwd ?? paths(agent).files);
    const seen = new Set<string>();
    for (const skill of [...listSkills(agent, settings), ...(root !== undefined ? listRepositorySkills(root) : [])].slice(0, SKILLS_OFFERED)) {
      if (seen.has(skill.folder)) continue;
      seen.add(skill.folder);
      const whose = skill.repository !== undefined ? " (the repository's)" : "";
      commands.push({ name: `skill:${skill.folder}`, description: `${skill.description || `the skill ${skill.name}`}${whose}`, input: { hint: "what to use it for" } });
    }
  } catch (e) {
    // The commands are still offered; the skills' folder says what is wrong at the next turn.
    log.warn("the agent's skills could not be listed", { error: (e as Error).message });
  }
  return commands;
}
