// The gate of a port endpoint that holds a key: until its connection has proved itself, only
// `initialize` and `_link/prove` go on to the agent. Any other request stands in as `_link/unproved`,
// which the agent refuses under the request's own id; a notification is dropped. Anyone on the
// machine can reach 127.0.0.1, where a Unix socket of mode 0600 or stdio reaches only its owner.
import { LINK_METHODS, type LinkConnection } from "../acp/link.js";
import { NOT_TEXT_METHOD, OVERSIZED_METHOD, TOO_DEEP_METHOD } from "../acp/initialize.js";
import { parseLine } from "./lines.js";

/** What is served before the proof: the handshake, the proof, and the stand-ins for lines too large or deep to read. */
const OPEN: ReadonlySet<string> = new Set(["initialize", LINK_METHODS.prove, OVERSIZED_METHOD, TOO_DEEP_METHOD, NOT_TEXT_METHOD]);

/**
 * What an unproved line that can't be read goes on as: a line no one reads as JSON, which the agent
 * refuses as a parse error. Never the line itself: one that the gate and the agent read apart would
 * be served unproved.
 */
const UNREADABLE = new TextEncoder().encode("{\n");

/** A line as it goes on to the agent: itself, its stand-in, or nothing. */
function gated(line: Uint8Array, decoder: TextDecoder, encoder: TextEncoder): Uint8Array | undefined {
  let msg: unknown;
  try {
    msg = parseLine(decoder.decode(line));
  } catch {
    return UNREADABLE;
  }
  if (typeof msg !== "object" || msg === null || Array.isArray(msg)) return line;
  const { method, id } = msg as { method?: unknown; id?: unknown };
  // A response, or a message without a method: the agent refuses it on its own.
  if (method === undefined) return line;
  if (typeof method === "string" && OPEN.has(method)) return line;
  if (id === undefined) return undefined;
  return encoder.encode(`${JSON.stringify({ jsonrpc: "2.0", id, method: LINK_METHODS.unproved, params: { method: typeof method === "string" ? method : null } })}\n`);
}

/** Passes whole lines through, those the connection may not send yet stood in for or dropped. */
export function gateLines(conn: LinkConnection): TransformStream<Uint8Array, Uint8Array> {
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  return new TransformStream({
    transform(line, controller) {
      if (conn.proved) return controller.enqueue(line);
      const out = gated(line, decoder, encoder);
      if (out) controller.enqueue(out);
    },
  });
}
