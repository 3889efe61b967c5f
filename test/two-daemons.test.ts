// Two daemons, one agent folder: clients prompt the same conversations through both at once. Turns
// never overlap (the model never has two requests of one conversation at a time, and each
// conversation's events alternate message and answer), each turn sees every turn before it whichever
// process took it, and nothing acknowledged is lost.
import { existsSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import { afterEach, beforeAll, expect, it, onTestFailed } from "vitest";
import { configure, openClient, scriptedSettings, socketStream, startDaemon, tempDir, type Daemon } from "./acp-client.js";
import { assertBuilt, BIN } from "./fixtures/built.js";
import { lastUserText, startModelServer, type RecordedRequest } from "./model-server.js";
import { checkWindowFile, readConversation } from "./soak/check.js";
import { messagesOf } from "./soak/model.js";

const THREADS = ["duo-1", "duo-2", "duo-3"];
const DAEMONS = 2;
const PROMPTS = 8;
/** A prompt's marker: its conversation, the daemon it was sent through, its number. */
const MARK = /\[(duo-\d+) d(\d+) #(\d+)\]/;

const cleanup: (() => unknown)[] = [];
beforeAll(() => {
  assertBuilt([BIN, "dist/store/lock.js", "dist/turn/turn.js"], ["acp", "daemon", "turn", "store", "protocol"]);
});
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const markerOf = (text: string): string | undefined => MARK.exec(text)?.[0];

function userMarkers(request: RecordedRequest): string[] {
  return messagesOf(request)
    .filter((m) => m.role === "user")
    .map((m) => markerOf(typeof m.content === "string" ? m.content : JSON.stringify(m.content)) ?? "?");
}

it("two daemons take turns on the same conversations, one at a time, and lose nothing", async () => {
  const tmp = tempDir("lnk-duo-");
  cleanup.push(() => tmp.remove());
  const server = await startModelServer();
  cleanup.push(() => server.close());

  // Which turn the model is answering, per conversation: a second one meanwhile is an overlap.
  const inFlight = new Map<string, string>();
  const overlaps: string[] = [];
  server.fallback = async (request) => {
    const marker = markerOf(lastUserText(request)) ?? "?";
    const thread = MARK.exec(marker)?.[1] ?? "?";
    const other = inFlight.get(thread);
    if (other !== undefined) overlaps.push(`${marker} asked while ${other} was being answered`);
    inFlight.set(thread, marker);
    // The model takes a while to answer; the turn holds its conversation meanwhile.
    await new Promise((resolve) => setTimeout(resolve, 5 + Math.floor(Math.random() * 40)));
    if (inFlight.get(thread) === marker) inFlight.delete(thread);
    return { text: `answer to ${marker}`, chunks: 3 };
  };

  const agent = join(tmp.path, "agent");
  configure(agent, scriptedSettings(server.url));
  const daemons: Daemon[] = [];
  for (let d = 1; d <= DAEMONS; d++) {
    const daemon = startDaemon(["--agent", agent, "--socket", join(tmp.path, `d${d}.sock`)]);
    cleanup.push(() => daemon.stop("SIGKILL"));
    onTestFailed(() => void process.stderr.write(`daemon ${d}'s log:\n${daemon.stderr()}\n`));
    daemons.push(daemon);
  }
  await Promise.all(daemons.map((d) => d.waitForLog(/"serving ACP"/)));

  // One client per daemon and conversation; the first daemon makes the conversations, the second resumes them.
  const clients = await Promise.all(
    daemons.flatMap((_, i) =>
      THREADS.map(async (thread) => {
        const { stream, socket } = await socketStream(join(tmp.path, `d${i + 1}.sock`));
        cleanup.push(() => socket.destroy());
        return { d: i + 1, thread, client: await openClient(stream) };
      }),
    ),
  );
  for (const { d, thread, client } of clients.filter((c) => c.d === 1)) {
    const made = await client.agent.request(acp.methods.agent.session.new, { cwd: agent, mcpServers: [], _meta: { link: { thread } } });
    expect(made.sessionId, `daemon ${d}`).toBe(thread);
  }
  for (const { thread, client } of clients.filter((c) => c.d !== 1)) {
    await client.agent.request(acp.methods.agent.session.resume, { sessionId: thread, cwd: agent, mcpServers: [] });
  }

  const acked: string[] = [];
  await Promise.all(
    clients.map(async ({ d, thread, client }) => {
      for (let k = 1; k <= PROMPTS; k++) {
        const marker = `[${thread} d${d} #${k}]`;
        const answer = await client.agent.request(acp.methods.agent.session.prompt, { sessionId: thread, prompt: [{ type: "text", text: `${marker} hello` }] });
        expect(answer.stopReason, marker).toBe("end_turn");
        acked.push(marker);
      }
    }),
  );
  expect(acked).toHaveLength(THREADS.length * DAEMONS * PROMPTS);
  expect(overlaps).toEqual([]);

  let switches = 0;
  for (const thread of THREADS) {
    const violations: string[] = [];
    const conv = readConversation(join(agent, "chats", thread), thread, violations);
    // Its window's events file, added to by one process and made again by the other after it: its lines are the events'.
    expect(existsSync(join(agent, "chats", thread, "window.jsonl")), thread).toBe(true);
    checkWindowFile(join(agent, "chats", thread), conv, violations);
    expect(violations, thread).toEqual([]);
    // Message, answer, message, answer…: a turn that overlapped another would interleave them.
    const pairs: string[] = [];
    conv.events.forEach((e, i) => {
      expect(e.kind, `${thread}/${i + 1}`).toBe("message");
      if (e.kind !== "message") return;
      expect(e.role, `${thread}/${i + 1}`).toBe(i % 2 === 0 ? "user" : "assistant");
      if (e.role === "user") pairs.push(markerOf(e.text) ?? "?");
      else expect(e.text, `${thread}/${i + 1}`).toBe(`answer to ${pairs.at(-1)}`);
    });
    // Every acknowledged prompt of the conversation is kept once, with its answer after it.
    expect([...pairs].sort()).toEqual(acked.filter((m) => m.startsWith(`[${thread} `)).sort());
    expect(conv.events).toHaveLength(2 * pairs.length);

    // Each turn was sent every message before it, whichever daemon wrote them.
    for (const request of server.requests.filter((r) => MARK.exec(lastUserText(r))?.[1] === thread)) {
      const own = markerOf(lastUserText(request)) ?? "?";
      expect(userMarkers(request), own).toEqual(pairs.slice(0, pairs.indexOf(own) + 1));
    }
    switches += pairs.filter((m, i) => i > 0 && MARK.exec(m)?.[2] !== MARK.exec(pairs[i - 1] ?? "")?.[2]).length;
  }
  // The daemons did take turns on the same conversations, rather than one after the other.
  expect(switches).toBeGreaterThan(0);
  expect(daemons.map((d) => d.child.exitCode)).toEqual([null, null]);
});
