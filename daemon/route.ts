// stdio for a process serving several agents (--agents): each request goes to the agent its
// `_meta.link.agent` names (a name or an id), on a connection of that agent's own, and every
// agent's answers come back on the one output. `initialize` goes to each, and is answered once.
// Each agent holds at most PENDING_MAX requests unanswered: one whose model is stalled never holds
// up another's.
import { INTERNAL_ERROR } from "../acp/errors.js";
import { NOT_TEXT_METHOD, OVERSIZED_METHOD, TOO_DEEP_METHOD } from "../acp/initialize.js";
import { PENDING_MAX, Unanswered, answerId, countedId } from "./front.js";
import { parseLine } from "./lines.js";

type Id = string | number;

export interface Routed {
  /** The names a request may give the agent: its name and its id. */
  readonly names: readonly string[];
  /** Serves one connection to the agent. */
  connect(input: ReadableStream<Uint8Array>, output: WritableStream<Uint8Array>): Promise<void>;
}

/** Stand-ins for lines too large or too deep to read: answered by any agent, each refuses them alike. */
const ANY_AGENT: ReadonlySet<string> = new Set([OVERSIZED_METHOD, TOO_DEEP_METHOD, NOT_TEXT_METHOD]);

interface Message {
  jsonrpc?: unknown;
  id?: unknown;
  method?: unknown;
  agent?: unknown;
}

function read(line: Uint8Array, decoder: TextDecoder): Message | undefined {
  try {
    const msg: unknown = parseLine(decoder.decode(line));
    if (typeof msg !== "object" || msg === null || Array.isArray(msg)) return undefined;
    const { jsonrpc, id, method, params } = msg as { jsonrpc?: unknown; id?: unknown; method?: unknown; params?: unknown };
    const meta = typeof params === "object" && params !== null ? (params as { _meta?: unknown })._meta : undefined;
    const link = typeof meta === "object" && meta !== null ? (meta as { link?: unknown }).link : undefined;
    const agent = typeof link === "object" && link !== null ? (link as { agent?: unknown }).agent : undefined;
    return { jsonrpc, id, method, agent };
  } catch {
    return undefined;
  }
}

const isId = (id: unknown): id is Id => typeof id === "string" || (typeof id === "number" && Number.isFinite(id));

/** Serves one connection (stdio) for every agent, each request routed by the agent it names. */
export async function route(agents: readonly Routed[], input: ReadableStream<Uint8Array>, output: WritableStream<Uint8Array>): Promise<void> {
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  const out = output.getWriter();
  const served = agents.map((a) => a.names[0] ?? "").join(", ");
  /**
   * Initialize requests sent to every agent: only the first agent's answer goes out. For each other
   * agent, how many answers of each id are its answers to an initialize, left out once each: a
   * client may use the id again for any request after, whose answer goes out.
   */
  const initializes = agents.map(() => new Map<Id, number>());
  const unanswered = agents.map(() => new Unanswered());
  const inputs = agents.map(() => new TransformStream<Uint8Array, Uint8Array>());
  const writers = inputs.map((t) => t.writable.getWriter());
  const connections = agents.map((a, i) =>
    a.connect(
      (inputs[i] as TransformStream<Uint8Array, Uint8Array>).readable,
      new WritableStream({
        async write(chunk) {
          const id = answerId(chunk, decoder);
          if (id !== undefined) (unanswered[i] as Unanswered).answered(id);
          const skip = initializes[i] as Map<Id, number>;
          if (skip.size > 0) {
            const left = id === undefined ? undefined : skip.get(id);
            if (id !== undefined && left !== undefined) {
              if (left > 1) skip.set(id, left - 1);
              else skip.delete(id);
              return;
            }
          }
          await out.write(chunk);
        },
      }),
    ),
  );
  const answer = (id: unknown, error: { code: number; message: string; data?: object }) => (isId(id) ? out.write(encoder.encode(`${JSON.stringify({ jsonrpc: "2.0", id, error })}\n`)) : undefined);
  const refuse = (id: unknown, message: string) => answer(id, { code: -32602, message: `Invalid params: ${message}` });
  const byName = (name: string) => agents.findIndex((a) => a.names.includes(name));

  const reader = input.getReader();
  for (;;) {
    const { done, value: line } = await reader.read();
    if (done) break;
    const msg = read(line, decoder);
    if (msg === undefined || typeof msg.method !== "string") {
      // Not a request the agents can route: one that can't be read, or whose method is no name, the
      // first agent refuses (-32600, as it would alone); a client's answer is left, as no agent asks.
      if (msg === undefined || msg.method !== undefined) await writers[0]?.write(line);
      continue;
    }
    if (msg.method === "initialize") {
      const id = msg.id;
      // Only under an id its answers can be told apart by: each agent's would go out under any other
      // (null, an object), one line bringing back as many answers as the process serves agents.
      if (!isId(id)) {
        await writers[0]?.write(line);
        continue;
      }
      initializes.forEach((skip, i) => i > 0 && skip.set(id, (skip.get(id) ?? 0) + 1));
      // Counted for each agent, as each answers it; never refused: it carries no turn, and is answered at once.
      const under = countedId(msg.jsonrpc, msg.id);
      if (under !== undefined) for (const u of unanswered) u.asked(under);
      await Promise.all(writers.map((w) => w.write(line)));
      continue;
    }
    if (ANY_AGENT.has(msg.method)) {
      await writers[0]?.write(line);
      continue;
    }
    if (typeof msg.agent !== "string") {
      await refuse(msg.id, `_meta.link.agent: name the agent this request is for: this process serves ${served}`);
      continue;
    }
    const at = byName(msg.agent);
    if (at < 0) {
      await refuse(msg.id, `_meta.link.agent: this process serves no agent ${JSON.stringify(msg.agent.slice(0, 80))}: it serves ${served}`);
      continue;
    }
    const under = countedId(msg.jsonrpc, msg.id);
    const held = unanswered[at] as Unanswered;
    if (under !== undefined) {
      // Past the bound, a request is answered at once, not held: held, it would be read and kept in
      // memory with nothing to bound how many (each a line of up to the bound on one), or stdin would be
      // read no further and every other agent's requests would wait with it. Refused, its client knows
      // at once which agent is behind, and may send it again once that agent answers; a notification
      // (a cancel of what it holds) still goes on.
      if (held.count >= PENDING_MAX) {
        const name = agents[at]?.names[0] ?? msg.agent;
        await answer(under, {
          code: INTERNAL_ERROR,
          message: `Internal error: agent ${JSON.stringify(name)} has ${PENDING_MAX} requests unanswered on this connection, the most it holds at once: this one was not taken; send it again once some are answered (a stalled model holds them)`,
          data: { agent: name, unanswered: PENDING_MAX },
        });
        continue;
      }
      held.asked(under);
    }
    // Not awaited: an agent busy reading holds up no other's requests; each agent's stay in order.
    void writers[at]?.write(line).catch(() => undefined);
  }
  await Promise.all(writers.map((w) => w.close().catch(() => undefined)));
  await Promise.allSettled(connections);
}
