// Link Harness's own Contract: what it says of itself when asked `contract` (spec: contract.txt).
// It claims a part of the contract, or a feature, only once it works.
import { CONTRACT_VERSION, FEATURES, type Contract, type Feature } from "../protocol/index.js";
import { ENDPOINT_EXPORTED, ENDPOINT_IMPORTED } from "../asp/sessions.js";

/** Features not built yet: left out of the list, so Link refuses a spec that turns one on. */
export const NOT_BUILT: readonly Feature[] = [];

export function contract(): Contract {
  return {
    version: CONTRACT_VERSION,
    // It reaches its model at model.base_url, Link's proxy, which holds the key.
    proxy: true,
    // It serves ACP on stdio, a Unix socket, or one port from LNK_PORT ("left out, 200").
    ports: 1,
    // Its endpoint answers _link/prove with an HMAC of the challenge made with the key.
    proof: true,
    // It hands over, through _link/recover, the answers of turns it finished but never delivered.
    recover: true,
    // Its endpoint reads which agent a request is for (_meta.link.agent).
    agent: true,
    // One process may serve several agents of one owner: --agents FILE (SharedAgents).
    shared: true,
    // It can start blank and be bound by one line of Bind: --blank CONTROL.
    blank: true,
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
    // It answers `instructions`: the system prompt a turn would send, by section.
    prompt: true,
    // It answers `conversation` and `conversations move`. The contract's JSON names this key
    // `conversations` and its paragraph `chats`: both are said, so Link reads yes by either name.
    conversations: true,
    chats: true,
    // Its endpoint's _asp/export gives the agent's own instructions, skills and memory and its
    // conversations; _asp/import takes sessions, each written as a new conversation. The contract's
    // state is the endpoint's over ASP, as initialize advertises agentState (contract.txt "state"):
    // the command `state import` takes every kind (asp/state-import.ts IMPORTED), but it is run by a
    // person or by Link on the agent's folder, not asked of the endpoint, so it is not claimed here.
    state: { export: [...ENDPOINT_EXPORTED], import: [...ENDPOINT_IMPORTED] },
    // What a session imported keeps and uses besides text: its tool calls and their answers, the
    // model's thinking (sent back with its calls), images and documents (embedded resources) as parts.
    session_content: ["tools", "thinking", "images", "resources"],
    // It reads memory/notes.md at each turn.
    notes: true,
    native_memory: false,
    // It carries who the agent is both ways: in at configure (Link's block of instruction.md, the
    // identity's skills from the home's copy), out at `state export`.
    identity: true,
    // Each feature built, as the spec says.
    features: Object.fromEntries(FEATURES.filter((f) => !NOT_BUILT.includes(f)).map((f) => [f, "spec" as const])),
  };
}
