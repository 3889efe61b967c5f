// What a first turn asks of its model before its request, asked ahead as a session opens: loaded on
// its own, not with the turn, so that the turn's own load stays its first prompt's.
import type { Settings } from "../protocol/index.js";
import { modelWindow } from "./facts.js";
import { connectAhead } from "./http.js";
import { preloadModelClient } from "./model.js";

/**
 * Asks ahead, in the background, what a first turn with these settings asks of its model before its
 * request: the window's facts (a runtime on this machine is asked once, and kept) and the model's
 * client. A turn that comes while it is asked waits for the same answer; a failure here is the
 * turn's to meet again, and say. Resolves once both are done, and never rejects. The model's
 * connection is opened meanwhile (turn/http.ts), so the first request goes out on it at once.
 */
export async function readyModel(settings: Settings, agentModel: string | undefined, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  connectAhead(settings.model.base_url);
  await Promise.all([modelWindow(settings, agentModel ?? settings.model.name, { env }).catch(() => undefined), preloadModelClient(settings, env).catch(() => undefined)]);
}
