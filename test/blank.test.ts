// --blank: a process that starts holding nothing of anyone's, its control socket 0600 from the moment it
// exists, bound by one line of Bind: a malformed one is refused and the process can still be bound,
// a second is refused, and the bound process answers as that agent, with the Bind's key filled into
// its settings in memory and written nowhere.
import { createHmac } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, watch, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { dirname, join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { answerText, daemonTestHooks, failure, openClient, portStream, scriptedSettings, servedPort, startDaemon, stdioClient, tempDir, watched } from "./acp-client.js";
import { WARM_PROMPTS } from "../daemon/blank.js";
import { BIN } from "./fixtures/built.js";
import { linkFreeEnv } from "./fixtures/env.js";
import type { ModelServer } from "./model-server.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/blank.js"], (s) => (server = s));

const BIND_KEY = "bind-key-3e9a51c07d2f4b68";
/** The log line a blank process writes once it has loaded and warmed itself. */
const Loaded = z.looseObject({ msg: z.literal("blank: loaded"), warmed: z.number().int(), asked: z.number().int() });
const Answer = z.union([z.object({}).strict(), z.object({ error: z.string() }).strict()]);

/**
 * Sends one line on the control socket and reads its one-line answer. `ended`: without its newline,
 * the client's side ended after it, as `printf '%s' "$bind" | nc -U` sends one.
 */
async function control(path: string, line: string, ended = false): Promise<z.infer<typeof Answer>> {
  const socket = connect(path);
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  cleanup.push(() => socket.destroy());
  let got = "";
  socket.setEncoding("utf8").on("data", (d: string) => (got += d));
  const closed = new Promise((resolve) => socket.once("close", resolve));
  if (ended) socket.end(line);
  else socket.write(`${line}\n`);
  await closed;
  return Answer.parse(JSON.parse(got));
}

function place() {
  const tmp = tempDir("lnk-blank-");
  cleanup.push(() => tmp.remove());
  const store = join(tmp.path, "store");
  const files = join(tmp.path, "files");
  mkdirSync(join(store, "instructions"), { recursive: true });
  mkdirSync(files);
  writeFileSync(join(store, "instructions", "instruction.md"), "You are Ida, bound a moment ago.\n");
  const bind = {
    agent: { name: "ida", id: "ida-7", owner: "ada" },
    key: BIND_KEY,
    settings: scriptedSettings(server.url, { model: { provider: "scripted", name: "scripted-model", base_url: server.url, key: "$LNK_KEY" } }),
    store,
    files,
  };
  return { root: tmp.path, store, files, bind, control: join(tmp.path, "control.sock") };
}

/** Every file under `dir`, with its text. */
function everything(dir: string): string {
  let all = "";
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) all += readFileSync(join(e.parentPath, e.name), "utf8");
  }
  return all;
}

describe("--blank", () => {
  it("listens 0600 from the moment its control socket exists; a bad Bind is refused and it stays blank; a good one binds it; a second is refused", async () => {
    const p = place();
    // Each time the socket is seen in its folder, it is 0600 already.
    const modes: number[] = [];
    const watcher = watch(p.root, (_event, name) => {
      if (name !== "control.sock") return;
      try {
        modes.push(statSync(p.control).mode & 0o777);
      } catch {
        // gone again
      }
    });
    cleanup.push(() => watcher.close());
    const d = watched(startDaemon(["--blank", p.control], linkFreeEnv()), cleanup);
    await d.waitForLog(/"blank: waiting for a Bind"/);
    expect(statSync(p.control).mode & 0o777).toBe(0o600);
    expect(modes.every((m) => m === 0o600)).toBe(true);
    // Blank, it serves no agent: nothing of anyone's was loaded, and nothing is written.
    expect(d.stderr()).not.toMatch(/"serving ACP"/);

    const link = join(p.root, "link-to-store");
    symlinkSync(p.store, link);
    const refused: [string, string, RegExp][] = [
      ["not JSON", "{not json", /not JSON/],
      ["no key", JSON.stringify({ ...p.bind, key: undefined }), /not a Bind: key/],
      ["bad settings", JSON.stringify({ ...p.bind, settings: { model: { provider: "x" } } }), /not a Bind: settings\.model/],
      ["a field unknown", JSON.stringify({ ...p.bind, extra: true }), /not a Bind/],
      ["a store that doesn't exist", JSON.stringify({ ...p.bind, store: join(p.root, "nowhere") }), /store: does not exist/],
      ["a store that is a link", JSON.stringify({ ...p.bind, store: link }), /store: is a symbolic link/],
      ["a relative store", JSON.stringify({ ...p.bind, store: "store" }), /store: not an absolute path/],
      ["no folder", JSON.stringify({ ...p.bind, store: undefined, files: undefined }), /names neither store nor files/],
      ["too long", `{"pad":"${"x".repeat(2 * 1024 * 1024 + 10)}"}`, /over 2097152 bytes/],
    ];
    for (const [what, line, said] of refused) {
      const answer = await control(p.control, line);
      expect(answer, what).toEqual({ error: expect.stringMatching(said) });
      // The key sent is never said back.
      expect(JSON.stringify(answer), what).not.toContain(BIND_KEY);
    }
    expect(readdirSync(p.store)).toEqual(["instructions"]);

    // A good Bind: the process answers {} once it serves that agent. Its settings name a skill Link
    // copied to the agent's home (its files folder): offered from the Bind's settings, as there is no
    // config.json to read them from.
    const triage = join(p.files, ".lnk", "agent", "skills", "triage", "SKILL.md");
    mkdirSync(dirname(triage), { recursive: true });
    writeFileSync(triage, "---\nname: triage\ndescription: sorts the inbox\n---\nDo it.\n");
    const bound = { ...p.bind, settings: { ...p.bind.settings, identity: { skills: ["triage"] } } };
    expect(await control(p.control, JSON.stringify(bound))).toEqual({});
    expect(await control(p.control, JSON.stringify(p.bind))).toEqual({ error: expect.stringContaining("bound already") });

    const c = await stdioClient(d, cleanup);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: p.files, mcpServers: [], _meta: { link: { agent: "ida-7" } } });
    server.fallback = (request) => {
      const system = request.body.messages?.[0]?.content;
      return { text: typeof system === "string" && system.includes("You are Ida") ? "Ida here" : "who?" };
    };
    const answer = await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "who is this?" }] });
    expect(answer.stopReason).toBe("end_turn");
    expect(answerText(c.updates, sessionId)).toBe("Ida here");
    expect(String(server.requests.at(-1)?.body.messages?.[0]?.content)).toContain(`- triage: sorts the inbox (${triage})`);
    // Offered, and run, as a command like the agent's own.
    const offered = await c.waitForUpdate((n) => n.sessionId === sessionId && n.update.sessionUpdate === "available_commands_update");
    expect(offered.update.sessionUpdate === "available_commands_update" ? offered.update.availableCommands.map((a) => a.name) : []).toContain("skill:triage");
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "/skill:triage the morning's mail" }] });
    expect(JSON.stringify(server.requests.at(-1)?.body.messages)).toContain("Do it.");
    // The placeholder was filled from the Bind's key: the model was sent it.
    expect(server.requests.at(-1)?.headers.authorization).toBe(`Bearer ${BIND_KEY}`);
    // The proof is made with the Bind's key.
    const proved = (await c.agent.request("_link/prove", { challenge: "link-asks-the-bound-one" })) as { hmac: string };
    expect(proved.hmac).toBe(createHmac("sha256", BIND_KEY).update("link-asks-the-bound-one").digest("hex"));
    expect(await failure(c.agent.request(acp.methods.agent.session.list, { _meta: { link: { agent: "someone-else" } } }))).toMatchObject({ code: -32602 });
    // The settings and the key are held in memory: no config.json, and the key in no file and no log line.
    expect(readdirSync(p.store).sort()).toEqual(["chats", "instructions"]);
    expect(everything(p.root)).not.toContain(BIND_KEY);
    expect(d.stderr()).not.toContain(BIND_KEY);
  });

  it("once bound, opens its model's connection ahead: the first prompt's request goes out on a connection made before the client came", async () => {
    const p = place();
    const d = watched(startDaemon(["--blank", p.control], linkFreeEnv()), cleanup);
    await d.waitForLog(/"blank: loaded"/);
    expect(await control(p.control, JSON.stringify(p.bind))).toEqual({});
    // Bound: a connection to its model is made, with no request on it yet.
    const bound = performance.now();
    const seen = server.requests.length;
    for (let waited = 0; server.connectionsSince(bound) === 0 && waited < 5000; waited += 10) await new Promise((r) => setTimeout(r, 10));
    const cameAt = performance.now();
    const c = await stdioClient(d, cleanup);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: p.files, mcpServers: [] });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "hello" }] });
    const asked = server.requests.slice(seen).find((r) => r.path.endsWith("/chat/completions"));
    expect(asked?.connectedAt).toBeGreaterThan(bound - 1000);
    expect(asked?.connectedAt).toBeLessThan(cameAt);
  });

  it("warms itself with prompts of a scratch agent while it waits, and stops warming once bound", async () => {
    // Left blank, it runs all its warm-up prompts, then says it is loaded.
    const idle = place();
    const waiting = watched(startDaemon(["--blank", idle.control], linkFreeEnv()), cleanup);
    const loaded = Loaded.parse(JSON.parse(await waiting.waitForLog(/"blank: loaded"/)));
    expect(loaded.warmed).toBe(WARM_PROMPTS);
    // Each prompt's turn asked the runtimes again (what it kept of their answers forgotten before it):
    // the code a bound agent's first session runs to ask its own endpoint has run as often as the turn's.
    expect(loaded.asked).toBeGreaterThanOrEqual(WARM_PROMPTS);
    // Bound at once, it stops after the prompt under way, and answers as the agent bound.
    const p = place();
    const d = watched(startDaemon(["--blank", p.control], linkFreeEnv()), cleanup);
    await d.waitForLog(/"blank: waiting for a Bind"/);
    expect(await control(p.control, JSON.stringify(p.bind))).toEqual({});
    const early = Loaded.parse(JSON.parse(await d.waitForLog(/"blank: loaded"/)));
    expect(early.warmed).toBeGreaterThanOrEqual(1);
    expect(early.warmed).toBeLessThan(WARM_PROMPTS);
    const c = await stdioClient(d, cleanup);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: p.files, mcpServers: [] });
    server.fallback = () => ({ text: "bound and warm" });
    expect((await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "hello" }] })).stopReason).toBe("end_turn");
    expect(answerText(c.updates, sessionId)).toBe("bound and warm");
    // Nothing of the warm-up is left in the agent's folder: only its own conversation.
    expect(readdirSync(join(p.store, "chats"))).toEqual([sessionId]);
  });

  it("leaves no scratch folder behind: removed when it stops while warming up, and a killed process's by the next", async () => {
    const tmp = tempDir("lnk-blank-tmp-");
    cleanup.push(() => tmp.remove());
    const env = { ...linkFreeEnv(), TMPDIR: tmp.path };
    const scratchOf = (pid: number | undefined) => readdirSync(tmp.path).filter((n) => n.startsWith(`lnk-link-harness-warm-${String(pid)}-`));
    /** Starts a blank process and waits until its warm-up's scratch folder is there. */
    const warming = async () => {
      const p = place();
      const d = watched(startDaemon(["--blank", p.control], env), cleanup);
      for (let i = 0; i < 2_000 && scratchOf(d.child.pid).length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 2));
      expect(scratchOf(d.child.pid)).toHaveLength(1);
      return d;
    };
    // Stopped by a signal while it warms up: it removes its folder on the way out.
    const stopped = await warming();
    await stopped.stop("SIGTERM");
    expect(scratchOf(stopped.child.pid)).toEqual([]);
    // Killed: nothing of it runs, and its folder stays, until the next blank process warms up.
    const killed = await warming();
    await killed.stop("SIGKILL");
    expect(scratchOf(killed.child.pid)).toHaveLength(1);
    // Beside it, a live process's folder, a link named as a dead one's, and another name: all kept.
    const live = join(tmp.path, `lnk-link-harness-warm-${process.pid}-abcdef`);
    mkdirSync(live);
    const target = join(tmp.path, "target");
    mkdirSync(target);
    writeFileSync(join(target, "kept.txt"), "kept");
    symlinkSync(target, join(tmp.path, `lnk-link-harness-warm-${String(killed.child.pid)}-linked`));
    mkdirSync(join(tmp.path, "lnk-link-harness-warm-other"));
    const next = watched(startDaemon(["--blank", place().control], env), cleanup);
    await next.waitForLog(/"blank: loaded"/);
    expect(scratchOf(killed.child.pid).sort()).toEqual([`lnk-link-harness-warm-${String(killed.child.pid)}-linked`]);
    expect(readFileSync(join(target, "kept.txt"), "utf8")).toBe("kept");
    expect(statSync(live).isDirectory()).toBe(true);
    expect(statSync(join(tmp.path, "lnk-link-harness-warm-other")).isDirectory()).toBe(true);
    // Its own, once it has warmed up, removed.
    expect(scratchOf(next.child.pid)).toEqual([]);
  });

  it("answers a Bind its client sent without a newline and then ended its side: a bad one is refused, a good one binds it", async () => {
    const p = place();
    const d = watched(startDaemon(["--blank", p.control], linkFreeEnv()), cleanup);
    await d.waitForLog(/"blank: waiting for a Bind"/);
    expect(await control(p.control, "{not json", true)).toEqual({ error: expect.stringMatching(/not JSON/) });
    expect(await control(p.control, JSON.stringify({ ...p.bind, store: "store" }), true)).toEqual({ error: expect.stringMatching(/store: not an absolute path/) });
    // A connection that sends nothing and ends is closed with no answer, and binds nothing.
    expect(await control(p.control, "", true).catch(() => "no answer")).toBe("no answer");
    expect(await control(p.control, JSON.stringify(p.bind), true)).toEqual({});
    expect(await control(p.control, JSON.stringify(p.bind), true)).toEqual({ error: expect.stringContaining("bound already") });
    const c = await stdioClient(d, cleanup);
    expect(await c.agent.request(acp.methods.agent.session.list, {})).toMatchObject({ sessions: [] });
  });

  it("prompts as the Bind's identity says, over the block an earlier configure left in instruction.md and beside the owner's own text there", async () => {
    const p = place();
    // An earlier configure's block, and the owner's own text after it: the bound process writes
    // nothing outside chats/, so the file stays as it was.
    const file = join(p.store, "instructions", "instruction.md");
    const before = "<!-- link:begin identity (written by Link at each configure: edit the agent's spec, not this) -->\n## Who you are\nYou are Pat.\n\n## Standing instructions\nBe brief.\n<!-- link:end -->\nAlways answer in French.\n";
    writeFileSync(file, before);
    const d = watched(startDaemon(["--blank", p.control], linkFreeEnv()), cleanup);
    await d.waitForLog(/"blank: waiting for a Bind"/);
    const identity = { persona: "You are Ida.", owner: "Ada, a pilot.", standing: "Cite your sources." };
    expect(await control(p.control, JSON.stringify({ ...p.bind, settings: { ...p.bind.settings, identity } }))).toEqual({});
    const c = await stdioClient(d, cleanup);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: p.files, mcpServers: [] });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "who are you?" }] });
    const system = String(server.requests.at(-1)?.body.messages?.[0]?.content);
    expect(system).toContain("## Who you are\nYou are Ida.\n\n## Your owner\nAda, a pilot.\n\n## Standing instructions\nCite your sources.\n\nAlways answer in French.");
    expect(system).not.toContain("You are Pat.");
    expect(system).not.toContain("Be brief.");
    // Once, not also in the base.
    expect(system.split("You are Ida.")).toHaveLength(2);
    expect(readFileSync(file, "utf8")).toBe(before);

    // A file of the owner's own text alone: the Bind's standing instructions come first, then it.
    writeFileSync(file, "Always answer in French.\n");
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "and now?" }] });
    expect(String(server.requests.at(-1)?.body.messages?.[0]?.content)).toContain("## Standing instructions\nCite your sources.\n\nAlways answer in French.");
  });

  it("bound with --port, serves that agent on the port, gated by the Bind's key; a port in use refuses the Bind and leaves it blank", async () => {
    const p = place();
    const busy = watched(startDaemon(["--blank", join(p.root, "other.sock"), "--port", "0"], linkFreeEnv()), cleanup);
    await busy.waitForLog(/"blank: waiting for a Bind"/);
    const other = place();
    expect(await control(join(p.root, "other.sock"), JSON.stringify(other.bind))).toEqual({});
    const taken = await servedPort(busy);

    const d = watched(startDaemon(["--blank", p.control, "--port", String(taken)], linkFreeEnv()), cleanup);
    await d.waitForLog(/"blank: waiting for a Bind"/);
    expect(await control(p.control, JSON.stringify(p.bind))).toEqual({ error: expect.stringContaining(`port ${taken} on 127.0.0.1 is in use`) });
    // Still blank, still able to be bound.
    await busy.stop();
    expect(await control(p.control, JSON.stringify(p.bind))).toEqual({});
    const port = await servedPort(d);
    const { stream, socket } = await portStream(port);
    cleanup.push(() => socket.destroy());
    const c = await openClient(stream);
    expect(await failure(c.agent.request(acp.methods.agent.session.list, {}))).toMatchObject({ code: -32000 });
  });

  it("a Bind refused once its --socket is made, its --port in use, never loads its agent; the next Bind's is loaded", async () => {
    const p = place();
    const busy = watched(startDaemon(["--blank", join(p.root, "other.sock"), "--port", "0"], linkFreeEnv()), cleanup);
    await busy.waitForLog(/"blank: waiting for a Bind"/);
    expect(await control(join(p.root, "other.sock"), JSON.stringify(place().bind))).toEqual({});
    const taken = await servedPort(busy);

    const d = watched(startDaemon(["--blank", p.control, "--socket", join(p.root, "acp.sock"), "--port", String(taken)], linkFreeEnv()), cleanup);
    await d.waitForLog(/"blank: waiting for a Bind"/);
    const refusedKey = "refused-key-5b07c2e9d41a86f3";
    const refused = { ...p.bind, agent: { name: "refused-one", id: "refused-1", owner: "ada" }, key: refusedKey };
    expect(await control(p.control, JSON.stringify(refused))).toEqual({ error: expect.stringContaining(`port ${taken} on 127.0.0.1 is in use`) });
    // Its socket was made, and taken back: the process served it a moment.
    expect(d.stderr()).toMatch(/"msg":"serving ACP"[^\n]*"agent":"refused-one"/);
    // What is shown is an absence: an agent is loaded 100 ms after its endpoint is made, so the
    // refused one, had its load been left set, would be on the log well within this half second.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(d.stderr()).not.toMatch(/"msg":"agent loaded"/);

    await busy.stop();
    expect(await control(p.control, JSON.stringify(p.bind))).toEqual({});
    await d.waitForLog(/"msg":"agent loaded","agent":"ida"/);
    expect(d.stderr().match(/"msg":"agent loaded"/g)).toHaveLength(1);
    expect(d.stderr()).not.toContain(refusedKey);
  });
});
