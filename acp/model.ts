// The model as a session config option (category `model`): the conversation's, kept as /model:set events.
// Spec: "A resumed conversation runs on what it chose, and a new one on the agent's."
import type { SessionConfigOption } from "@agentclientprotocol/sdk";
import type { Settings } from "../protocol/index.js";
import { appendEvent } from "../store/index.js";
import { listedModels } from "../turn/runtime.js";
import { ParamsError } from "./meta.js";
import type { Sessions } from "./sessions.js";

export const MODEL_OPTION = "model" as const;

/**
 * The models the option offers: the conversation's, the agent's, then those the endpoint lists
 * (GET {base_url}/models, when it answers; kept as a runtime's answer is), each once.
 */
export async function offeredModels(current: string, settings: Settings | undefined): Promise<string[]> {
  const agents = settings?.model.name;
  const listed = settings ? ((await listedModels(settings).catch(() => undefined)) ?? []) : [];
  return [...new Set([current, ...(agents !== undefined ? [agents] : []), ...listed])];
}

/** The model option: its value the conversation's model; the agent's own and the provider's are offered beside it. */
export async function configOptions(sessions: Sessions, thread: string, settings: Settings | undefined): Promise<SessionConfigOption[]> {
  const agents = settings?.model.name;
  const current = sessions.model(thread) ?? agents;
  if (current === undefined) return [];
  const values = await offeredModels(current, settings);
  return [
    {
      type: "select",
      id: MODEL_OPTION,
      name: "Model",
      description: "The model this conversation runs on (a model of the agent's provider)",
      category: "model",
      currentValue: current,
      options: values.map((value) => ({ value, name: value, ...(value === agents ? { description: "the agent's model" } : {}) })),
    },
  ];
}

/**
 * Setting the model is /model:set: a command event of the conversation, read back at each of its
 * turns. Any name is taken, since a switch stays within the provider, which knows its models.
 */
export async function setModel(sessions: Sessions, thread: string, configId: string, value: unknown): Promise<void> {
  if (configId !== MODEL_OPTION) throw new ParamsError(`configId: this agent has no option ${JSON.stringify(configId.slice(0, 80))}`);
  if (typeof value !== "string" || value.trim().length === 0) throw new ParamsError("value: the model is a non-empty name");
  await appendEvent(sessions.conversation(thread), { v: 1, kind: "command", name: "/model:set", model: value.trim(), time: new Date().toISOString() });
}
