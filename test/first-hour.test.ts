// What a newcomer and an editor meet first, over the built daemon: the copy of a conversation whose
// answer was cut short or never came, a method the agent doesn't serve, said plainly, and a
// session's working folder kept, reported and filtered by.
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { paths, readEventsFrom } from "../store/index.js";
import { configure, daemonTestHooks, failure, lockFreed, scriptedSettings, startDaemon, stdioClient, tempDir, watched, type Client } from "./acp-client.js";
import type { ModelServer } from "./model-server.js";
import { BIN, ROOT } from "./fixtures/built.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/acp/app.js"], (s) => (server = s));

/** An agent's folder, configured for the scripted model, removed after the test. */
function agentDir(): string {
  const folder = tempDir("lnk-first-");
  cleanup.push(() => folder.remove());
  configure(folder.path, scriptedSettings(server.url));
  return folder.path;
}

async function session(): Promise<{ c: Client; dir: string; sessionId: string }> {
  const dir = agentDir();
  const c = await stdioClient(watched(startDaemon(["--agent", dir]), cleanup), cleanup);
  const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
  return { c, dir, sessionId };
}

const prompt = (c: Client, sessionId: string, text: string) => c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] });
/** The copy, once the turn that answered has made it (after its answer, under its lock). */
async function transcript(dir: string, sessionId: string): Promise<string> {
  const conv = paths({ dir }).conversation(sessionId);
  await lockFreed(conv.lock);
  return readFileSync(conv.transcript, "utf8");
}

describe("the copy of a conversation", { timeout: 60_000 }, () => {
  it("marks an answer cut short by a cancel, so it doesn't read as whole", async () => {
    const { c, dir, sessionId } = await session();
    server.script({ text: "The first words, then nothing more for a long while", chunks: 50, chunkDelayMs: 300 });
    const turn = prompt(c, sessionId, "tell me a long story");
    await c.waitForUpdate((n) => n.update.sessionUpdate === "agent_message_chunk");
    await c.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    expect(await turn).toMatchObject({ stopReason: "cancelled" });
    const copy = await transcript(dir, sessionId);
    expect(copy).toContain("tell me a long story");
    expect(copy).toMatch(/\*\(cut short: the turn was stopped\)\*\n<!-- answer 2 -->/);
  });

  it("holds a conversation whose only turn failed: the question, and that it got no answer and why", async () => {
    const { c, dir, sessionId } = await session();
    server.script({ error: { status: 400, message: "This model does not exist", code: "model_not_found" } });
    expect((await failure(prompt(c, sessionId, "are you there?"))).message).toContain("This model does not exist");
    const copy = await transcript(dir, sessionId);
    expect(copy).toContain("are you there?");
    expect(copy).toMatch(/\*\(no answer: the turn failed: the model answered 400: This model does not exist\)\*\n<!-- answer 2 -->/);
    // The next turn goes on from it, and the copy grows with its answer.
    server.script({ text: "Here now." });
    expect(await prompt(c, sessionId, "again?")).toMatchObject({ stopReason: "end_turn" });
    expect(await transcript(dir, sessionId)).toMatch(/<!-- answer 2 -->\n\n\*\*Owner\*\* · [^\n]+\nagain\?\n\n\*\*Agent\*\* · [^\n]+\nHere now\.\n<!-- answer 4 -->\n\n$/);
  });
});

describe("a method the agent doesn't serve", { timeout: 30_000 }, () => {
  it("is answered -32601 in plain words, naming the method", async () => {
    const { c } = await session();
    const err = await failure(c.agent.request("session/set_mode" as never, { sessionId: "x", modeId: "y" } as never));
    expect(err).toMatchObject({ code: -32601, message: "Method not found: session/set_mode" });
  });
});

describe("a session's working folder", { timeout: 60_000 }, () => {
  it("is kept with its conversation, reported by session/list and filtered by it, across a restart", async () => {
    const dir = agentDir();
    const repoA = join(dir, "repo-a");
    const repoB = join(dir, "repo-b");
    const d1 = watched(startDaemon(["--agent", dir]), cleanup);
    const c1 = await stdioClient(d1, cleanup);
    const a = (await c1.agent.request(acp.methods.agent.session.new, { cwd: repoA, mcpServers: [] })).sessionId;
    const b = (await c1.agent.request(acp.methods.agent.session.new, { cwd: repoB, mcpServers: [] })).sessionId;
    await prompt(c1, a, "in repository a");
    await prompt(c1, b, "in repository b");
    const listed = async (c: Client, cwd?: string) =>
      (await c.agent.request(acp.methods.agent.session.list, cwd === undefined ? {} : { cwd })).sessions.map((s) => [s.sessionId, s.cwd]).sort();
    expect(await listed(c1)).toEqual([[a, repoA], [b, repoB]].sort());
    expect(await listed(c1, repoA)).toEqual([[a, repoA]]);
    expect(await listed(c1, join(dir, "elsewhere"))).toEqual([]);

    c1.close();
    d1.child.stdin?.end();
    await d1.exited;
    // Another process knows each folder from the conversation's own events, and keeps it.
    const c2 = await stdioClient(watched(startDaemon(["--agent", dir]), cleanup), cleanup);
    expect(await listed(c2, repoB)).toEqual([[b, repoB]]);
    await prompt(c2, b, "again in b");
    const users = readEventsFrom(paths({ dir }).conversation(b), 1).flatMap((e) => (e.event.kind === "message" && e.event.role === "user" ? [e.event.cwd] : []));
    expect(users).toEqual([repoB, repoB]);
  });
});

describe("a conversation's title", { timeout: 30_000 }, () => {
  it("is its first owner message's first line, sent as session_info_update with it, and session/list says the same", async () => {
    const { c, sessionId } = await session();
    await prompt(c, sessionId, "Plan the  trip to Lisbon\nwith the details");
    const infos = c.updates.filter((n) => n.update.sessionUpdate === "session_info_update");
    expect(infos.map((n) => [n.sessionId, (n.update as { title?: string }).title])).toEqual([[sessionId, "Plan the trip to Lisbon"]]);
    const listed = await c.agent.request(acp.methods.agent.session.list, {});
    expect(listed.sessions.find((s) => s.sessionId === sessionId)?.title).toBe("Plan the trip to Lisbon");
    // Only the first message titles it.
    await prompt(c, sessionId, "and another thing");
    expect(c.updates.filter((n) => n.update.sessionUpdate === "session_info_update")).toHaveLength(1);
  });
});

describe("what a tool showed", { timeout: 60_000 }, () => {
  it("reaches the client as ACP content (an image as an image), and a file a call reads as its location", async () => {
    const dir = agentDir();
    writeFileSync(join(dir, "notes.txt"), "a file a tool reads\n");
    const env = {
      LNK_TOOL_EVERYTHING: `"${process.execPath}" "${join(ROOT, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")}" stdio`,
      LNK_TOOL_FS: `"${process.execPath}" "${join(ROOT, "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")}" "${dir}"`,
    };
    const c = await stdioClient(watched(startDaemon(["--agent", dir], env), cleanup), cleanup);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    server.script(
      {
        tool_calls: [
          { id: "img", name: "everything__get-tiny-image", arguments: {} },
          { id: "read", name: "fs__read_text_file", arguments: { path: join(dir, "notes.txt") } },
        ],
      },
      { text: "Seen." },
    );
    expect(await prompt(c, sessionId, "show me")).toMatchObject({ stopReason: "end_turn" });
    const updates = c.updates.map((n) => n.update);
    const image = updates.find((u) => u.sessionUpdate === "tool_call_update" && u.toolCallId === "img");
    const blocks = image?.sessionUpdate === "tool_call_update" ? (image.content ?? []) : [];
    expect(blocks.some((b) => b.type === "content" && b.content.type === "image" && b.content.mimeType === "image/png" && b.content.data.length > 100)).toBe(true);
    const read = updates.find((u) => u.sessionUpdate === "tool_call" && u.toolCallId === "read");
    expect(read).toMatchObject({ locations: [{ path: join(dir, "notes.txt") }] });
    // The model was sent text for the image (its 32 KiB rule holds), never the image's data.
    const sent = JSON.stringify(server.requests.at(-1)?.body.messages);
    expect(sent).toContain("[image image/png");
    expect(sent.length).toBeLessThan(40_000);
  });
});

describe("the instructions of the repository a session works in", { timeout: 60_000 }, () => {
  it("are its AGENTS.md, for a session whose folder is in the repository; a session outside one is sent the same prompt as before", async () => {
    const dir = agentDir();
    const repo = join(dir, "repo");
    mkdirSync(join(repo, ".git"), { recursive: true });
    mkdirSync(join(repo, "src"));
    writeFileSync(join(repo, "AGENTS.md"), "Indent with tabs. Run make check before you say it works.\n");
    const plain = join(dir, "plain");
    mkdirSync(plain);
    const c = await stdioClient(watched(startDaemon(["--agent", dir]), cleanup), cleanup);
    const system = async (cwd: string) => {
      const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd, mcpServers: [] });
      await prompt(c, sessionId, "hello");
      return String(server.requests.at(-1)?.body.messages?.[0]?.content);
    };
    const before = await system(plain);
    const inRepo = await system(join(repo, "src"));
    expect(inRepo).toContain(`## The repository you work in: ${repo}\nIts AGENTS.md says:\nIndent with tabs. Run make check before you say it works.`);
    expect(before).not.toContain("AGENTS.md");
    // The repository's section sits after the environment and before the standing instructions; the rest is as it was.
    expect(inRepo.replace(/\n\n## The repository you work in:[\s\S]*?works\./, "")).toBe(before);
  });
});

describe("sessions opened and left empty", { timeout: 60_000 }, () => {
  it("are listed only by the process that holds them open, so they don't pile up; their ids still hold anywhere", async () => {
    const dir = agentDir();
    const d1 = watched(startDaemon(["--agent", dir]), cleanup);
    const c1 = await stdioClient(d1, cleanup);
    const used = (await c1.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] })).sessionId;
    const empty = (await c1.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] })).sessionId;
    await prompt(c1, used, "something said");
    // The empty one has no folder: it is made at a conversation's first event.
    const chats = readdirSync(join(dir, "chats"));
    expect(chats).toContain(used);
    expect(chats).not.toContain(empty);
    const ids = async (c: Client) => (await c.agent.request(acp.methods.agent.session.list, {})).sessions.map((s) => s.sessionId).sort();
    expect(await ids(c1)).toEqual([used, empty].sort());
    c1.close();
    d1.child.stdin?.end();
    await d1.exited;
    const c2 = await stdioClient(watched(startDaemon(["--agent", dir]), cleanup), cleanup);
    expect(await ids(c2)).toEqual([used]);
    // The empty one's id still holds: resumed, and answered.
    await c2.agent.request(acp.methods.agent.session.resume, { sessionId: empty, cwd: dir });
    expect(await prompt(c2, empty, "now something")).toMatchObject({ stopReason: "end_turn" });
    expect(await ids(c2)).toEqual([used, empty].sort());
  });
});
