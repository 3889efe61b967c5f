// Link Harness's own Contract: what it says of itself when asked `contract` (spec: contract.txt).
import { CONTRACT_VERSION, FEATURES, type Contract } from "../protocol/index.js";

export function contract(): Contract {
  return {
    version: CONTRACT_VERSION,
    // It reaches its model at model.base_url, Link's proxy, which holds the key.
    proxy: true,
    // Its endpoint reads who a message is from (session/prompt _meta.link.from).
    from: true,
    // It keeps a conversation's tools (tools.json: a subagent's list narrows, never widens).
    tools: true,
    // It takes images and documents as OpenAI content parts.
    parts: true,
    // It takes the agent spec's [instructions], section by section.
    instructions: true,
    // It writes only chats/ of the agent's own folder.
    folders: true,
    acp: true,
    // It reads memory/notes.md at each turn.
    notes: true,
    native_memory: false,
    // Link Harness honours every feature as the spec says.
    features: Object.fromEntries(FEATURES.map((f) => [f, "spec" as const])),
  };
}
