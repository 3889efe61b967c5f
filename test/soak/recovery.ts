// What the soak asks of recovery once its kills are done: `_link/recover` on the last daemon hands over
// each owed answer once (no answer twice in one call, nothing at a second call), each one an answer on
// disk of the conversation it names, and leaves no owed file behind once its answer was read.
import { readdirSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { z } from "zod";
import { paths, readEventsFrom } from "../../store/index.js";

const Recovered = z.object({
  result: z.object({ answers: z.array(z.object({ sessionId: z.string(), event: z.number(), text: z.string(), time: z.string() })), more: z.boolean().optional() }),
});

/** Asks `_link/recover` of the daemon on `socket` until it has nothing more; each call's answers. */
async function recoverAll(socket: string): Promise<z.infer<typeof Recovered>["result"]["answers"][]> {
  const conn = connect(socket);
  await new Promise<void>((resolve, reject) => {
    conn.once("connect", resolve);
    conn.once("error", reject);
  });
  const waiting = new Map<number, (line: unknown) => void>();
  createInterface({ input: conn })
    .on("line", (line) => {
      const msg = z.object({ id: z.unknown() }).loose().safeParse(JSON.parse(line));
      if (msg.success && typeof msg.data.id === "number") waiting.get(msg.data.id)?.(msg.data);
    })
    .on("error", () => undefined);
  const ask = (id: number, method: string, params: object) =>
    new Promise<unknown>((resolve) => {
      waiting.set(id, resolve);
      conn.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`);
    });
  try {
    await ask(1, "initialize", { protocolVersion: 1, clientCapabilities: {} });
    const calls: z.infer<typeof Recovered>["result"]["answers"][] = [];
    for (let id = 2; id < 50; id++) {
      const got = Recovered.parse(await ask(id, "_link/recover", {})).result;
      calls.push(got.answers);
      if (!got.more && got.answers.length === 0) break;
    }
    return calls;
  } finally {
    conn.destroy();
  }
}

/**
 * How soon after a response reached its client a kill of the daemon may fall in the one window
 * acp(7) tells of: the answer written, its owed file not yet removed (the process's work after a
 * response, on a loaded machine, and the kill's own way).
 */
export const DELIVERED_WINDOW_MS = 100;

/**
 * `delivered`: the answers the prompts' own responses brought, with when the client had each (each
 * prompt asked once, each answer its prompt's own text, so one handed over again is one a client
 * already had): a violation, unless a daemon was killed (`killedAt`) within DELIVERED_WINDOW_MS of
 * that response, which is the window acp(7) tells of; those are counted (`again`).
 */
export async function checkRecovery(
  agent: string,
  socket: string,
  threads: readonly string[],
  violations: string[],
  delivered: ReadonlyMap<string, number>,
  killedAt: readonly number[],
): Promise<{ recovered: number; again: number }> {
  let calls: Awaited<ReturnType<typeof recoverAll>>;
  try {
    calls = await recoverAll(socket);
  } catch (e) {
    violations.push(`_link/recover could not be asked: ${(e as Error).message}`);
    return { recovered: 0, again: 0 };
  }
  let again = 0;
  if ((calls.at(-1)?.length ?? 0) > 0) violations.push("_link/recover still handed answers over after 48 calls");
  const seen = new Set<string>();
  for (const a of calls.flat()) {
    const key = `${a.sessionId} ${a.event}`;
    if (seen.has(key)) violations.push(`_link/recover handed over ${key} twice`);
    seen.add(key);
    const event = readEventsFrom(paths({ dir: agent }).conversation(a.sessionId), a.event).find((e) => e.n === a.event)?.event;
    if (event?.kind !== "message" || event.role !== "assistant" || event.text !== a.text) violations.push(`_link/recover handed over ${key}, which is not that conversation's answer`);
    const had = delivered.get(a.text);
    if (had !== undefined) {
      if (killedAt.some((k) => k >= had && k - had <= DELIVERED_WINDOW_MS)) again++;
      else violations.push(`_link/recover handed over ${key} (${a.text}), an answer its own prompt's response delivered already`);
    }
  }
  // The answer to the last call was read, so every owed file it took is gone; the daemon owes nothing more.
  await new Promise((resolve) => setTimeout(resolve, 500));
  for (const thread of threads) {
    const owed = readdirSync(join(agent, "chats", thread)).filter((n) => n.startsWith("owed-"));
    if (owed.length > 0) violations.push(`${thread}: ${owed.length} owed files left after _link/recover: ${owed.slice(0, 3).join(", ")}`);
  }
  return { recovered: seen.size, again };
}
