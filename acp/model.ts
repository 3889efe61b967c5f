// The model as a session config option (category `model`): the conversation's, kept as /model:set events.
// Spec: "A resumed conversation runs on what it chose, and a new one on the agent's."
import type { SessionConfigOption } from "@agentclientprotocol/sdk";
import type { Settings } from "../protocol/index.js";
import { setConversationModel, type CommandContext } from "../turn/commands.js";
import { knownModels, listedModels } from "../turn/runtime.js";
import { ParamsError } from "./meta.js";
import type { Sessions, SessionState } from "./sessions.js";

export const MODEL_OPTION = "model" as const;

/**
 * The models the option offers: the conversation's, the agent's, then those the endpoint lists
 * (GET {base_url}/models, when it answers; kept as a runtime's answer is), each once.
 */
export async function offeredModels(current: string, agents: string | undefined, settings: Settings | undefined): Promise<string[]> {
  const listed = settings ? ((await listedModels(settings).catch(() => undefined)) ?? []) : [];
  return offered(current, agents, listed);
}

const offered = (current: string, agents: string | undefined, listed: readonly string[]): string[] => [...new Set([current, ...(agents !== undefined ? [agents] : []), ...listed])];

function modelOption(current: string, agents: string | undefined, values: readonly string[]): SessionConfigOption {
  return {
    type: "select",
    id: MODEL_OPTION,
    name: "Model",
    description: "The model this conversation runs on (a model of the agent's provider)",
    category: "model",
    currentValue: current,
    options: values.map((value) => ({ value, name: value, ...(value === agents ? { description: "the agent's model" } : {}) })),
  };
}

/** The agent's model (as `/model:set --agent` set it, else its settings') and the conversation's, which is the agent's unless it chose one. */
function sessionModels(sessions: Sessions, session: SessionState, settings: Settings | undefined, agentModel: string | undefined): { agents: string | undefined; current: string | undefined } {
  const agents = agentModel ?? settings?.model.name;
  return { agents, current: sessions.model(session) ?? agents };
}

/**
 * The options of a session just opened, answered at once: with the endpoint's models when this
 * process knows them, else without, and `later` the options once the endpoint answered (undefined
 * when it adds nothing), for a `config_option_update`. An opened session never waits for the
 * endpoint's list, however slow the endpoint is to answer it.
 */
export function configOptionsNow(
  sessions: Sessions,
  session: SessionState,
  settings: Settings | undefined,
  agentModel?: string,
): { options: SessionConfigOption[]; later?: Promise<SessionConfigOption[] | undefined> } {
  const { agents, current } = sessionModels(sessions, session, settings, agentModel);
  if (current === undefined) return { options: [] };
  const known = settings ? knownModels(settings) : [];
  if (known !== undefined || !settings) return { options: [modelOption(current, agents, offered(current, agents, known ?? []))] };
  const now = offered(current, agents, []);
  const later = listedModels(settings)
    .catch(() => undefined)
    .then((listed) => {
      const values = offered(current, agents, listed ?? []);
      return values.length > now.length ? [modelOption(current, agents, values)] : undefined;
    });
  return { options: [modelOption(current, agents, now)], later };
}

/**
 * The model option: its value the conversation's model; the agent's own (as `/model:set --agent` set
 * it in this process, else as it started) and the provider's are offered beside it.
 */
export async function configOptions(sessions: Sessions, session: SessionState, settings: Settings | undefined, agentModel?: string): Promise<SessionConfigOption[]> {
  const { agents, current } = sessionModels(sessions, session, settings, agentModel);
  if (current === undefined) return [];
  return [modelOption(current, agents, await offeredModels(current, agents, settings))];
}

/**
 * Setting the model option is /model:set, through the same code: a command event of the conversation,
 * read back at each of its turns, within the agent's provider. Its refusal is the command's reply.
 */
export async function setModel(ctx: CommandContext, configId: string, value: unknown): Promise<void> {
  if (configId !== MODEL_OPTION) throw new ParamsError(`configId: this agent has no option ${JSON.stringify(configId.slice(0, 80))}`);
  if (typeof value !== "string" || value.trim().length === 0) throw new ParamsError("value: the model is a non-empty name");
  // Not typed: kept without a text, so a loaded chat shows no message for it.
  const outcome = await setConversationModel(ctx, value.trim(), "");
  if (outcome.refused) throw new ParamsError(`value: ${outcome.reply}`);
}
