// What `initialize` answers: static, and free of the ACP SDK and zod, so the daemon can answer it
// while it still loads what the rest of the protocol needs.

/** The ACP protocol version spoken (the SDK's PROTOCOL_VERSION; a test holds them equal). */
export const PROTOCOL_VERSION = 1;

/** Link Harness's contract version: spec/contract.txt. */
const CONTRACT = 2;

/** What `initialize` says under `agentCapabilities._meta`. */
export const INITIALIZE_META = {
  // What `_asp/export` gives and `_asp/import` takes (asp/sessions.ts ENDPOINT_EXPORTED, ENDPOINT_IMPORTED; a test holds them equal).
  link: { contract: CONTRACT, agentState: { export: ["instructions", "skills", "memory", "sessions"] as string[], import: ["sessions"] as string[] } },
} as const;

/** Stands in for a message too large to read (daemon/lines.ts), so its request still gets an answer. */
export const OVERSIZED_METHOD = "_link/oversized";
/** Stands in for a message that nests too deep to read (daemon/lines.ts), so its request still gets an answer. */
export const TOO_DEEP_METHOD = "_link/too-deep";
/** Stands in for a message whose bytes are not UTF-8 text (daemon/lines.ts), so its request still gets an answer. */
export const NOT_TEXT_METHOD = "_link/not-text";

export function initializeResult(version: string) {
  return {
    protocolVersion: PROTOCOL_VERSION,
    agentCapabilities: {
      loadSession: true,
      promptCapabilities: { image: true, audio: false, embeddedContext: true },
      mcpCapabilities: { http: true, sse: false },
      sessionCapabilities: { list: {}, resume: {}, close: {} },
      _meta: INITIALIZE_META,
    },
    agentInfo: { name: "lnk-link-harness", title: "Link Harness", version },
    authMethods: [] as never[],
  };
}
