// --agents: one process serving three agents, each on its own port and on stdio by the agent a request
// names, each answering from its own folder, instructions and tools, never another's, turns of all
// three running at once.
import { createHmac } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import * as acp from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { CLIENT_PROOF_PREFIX } from "../acp/link.js";
import { PENDING_MAX } from "../daemon/front.js";
import { paths } from "../store/index.js";
import { answerText, configure, daemonTestHooks, failure, openClient, portStream, scriptedSettings, servedPort, startDaemon, stdioClient, tempDir, until, watched, type Client } from "./acp-client.js";
import { BIN, ROOT } from "./fixtures/built.js";
import { linkFreeEnv } from "./fixtures/env.js";
import { freePort } from "./fixtures/port.js";
import type { ModelServer, RecordedRequest } from "./model-server.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/shared.js", "dist/daemon/route.js"], (s) => (server = s));

const EVERYTHING = `"${process.execPath}" "${ROOT}node_modules/@modelcontextprotocol/server-everything/dist/index.js" stdio`;
const GAMMA_KEY = "gamma-key-8d1f3c5a7e902b46";

interface Agent {
  name: string;
  id: string;
  owner: string;
  home: string;
  files: string;
  agent?: string;
  port: number;
  env: Record<string, string>;
}

/** Three agents of one owner, each with its folders, its instructions and its own env. */
function threeAgents(): { root: string; agents: Agent[]; file: string } {
  const tmp = tempDir("lnk-shared-");
  cleanup.push(() => tmp.remove());
  const agents = (["alpha", "beta", "gamma"] as const).map((name): Agent => {
    const own = join(tmp.path, name, "own");
    const files = join(tmp.path, name, "files");
    mkdirSync(files, { recursive: true });
    configure(own, scriptedSettings(server.url));
    mkdirSync(join(own, "instructions"), { recursive: true });
    writeFileSync(join(own, "instructions", "instruction.md"), `You are ${name}, and no one else.\n`);
    // Each agent's model key is its own environment's (LNK_MODEL_KEY), never another's.
    const env: Record<string, string> = {
      LNK_MODEL_KEY: `model-key-of-${name}`,
      ...(name === "alpha" ? { LNK_TOOL_EVERYTHING: EVERYTHING } : name === "gamma" ? { LNK_KEY: GAMMA_KEY } : {}),
    };
    return { name, id: `${name}-id`, owner: "ada", home: join(tmp.path, name), files, agent: own, port: 0, env };
  });
  const file = join(tmp.path, "agents.json");
  writeFileSync(file, JSON.stringify(agents));
  return { root: tmp.path, agents, file };
}

const systemOf = (r: RecordedRequest): string => {
  const first = r.body.messages?.[0];
  return typeof first?.content === "string" ? first.content : "";
};
const whoIn = (r: RecordedRequest) => [...systemOf(r).matchAll(/You are (\w+), and no one else/g)].map((m) => m[1]);

async function portClient(port: number): Promise<Client> {
  const { stream, socket } = await portStream(port);
  const c = await openClient(stream);
  cleanup.push(() => socket.destroy());
  return c;
}

const text = (s: string) => [{ type: "text" as const, text: s }];

describe("--agents", () => {
  it("three agents in one process answer each from its own folder, instructions and tools, turns of all three at once", async () => {
    const { agents, file } = threeAgents();
    const d = watched(startDaemon(["--agents", file], linkFreeEnv()), cleanup);
    const [alphaPort, betaPort, gammaPort] = [await servedPort(d, /"agent":"alpha"/), await servedPort(d, /"agent":"beta"/), await servedPort(d, /"agent":"gamma"/)];
    expect(new Set([alphaPort, betaPort, gammaPort]).size).toBe(3);

    const alpha = await portClient(alphaPort);
    const gamma = await portClient(gammaPort);
    const stdio = await stdioClient(d, cleanup);
    // gamma holds a key: its port serves it only once the client has proved it holds it too.
    expect(await failure(gamma.agent.request(acp.methods.agent.session.list, {}))).toMatchObject({ code: -32000 });
    const { nonce } = (await gamma.agent.request("_link/prove", { challenge: "from-link-to-gamma-0001" })) as { nonce: string; hmac: string };
    await gamma.agent.request("_link/prove", { answer: createHmac("sha256", GAMMA_KEY).update(`${CLIENT_PROOF_PREFIX}${nonce}`).digest("hex") });
    // alpha's port holds no key: no proof is asked.
    const beta = { agent: { link: { agent: "beta-id" } } };

    const sa = (await alpha.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [], _meta: { link: { thread: "same-name" } } })).sessionId;
    const sb = (await stdio.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [], _meta: { link: { agent: "beta", thread: "same-name" } } })).sessionId;
    const sg = (await gamma.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [], _meta: { link: { thread: "same-name" } } })).sessionId;
    expect([sa, sb, sg]).toEqual(["same-name", "same-name", "same-name"]);

    // Each turn is answered only once all three have asked the model: they run at the same time.
    server.fallback = async (request) => {
      await server.waitForRequest(3);
      return { text: `I am ${whoIn(request).join(" and ")}` };
    };
    const answers = (await Promise.all([
      alpha.agent.request(acp.methods.agent.session.prompt, { sessionId: sa, prompt: text("who are you?") }),
      stdio.agent.request(acp.methods.agent.session.prompt, { sessionId: sb, prompt: text("who are you?"), _meta: { link: { agent: "beta-id" } } }),
      gamma.agent.request(acp.methods.agent.session.prompt, { sessionId: sg, prompt: text("who are you?") }),
    ])) as acp.PromptResponse[];
    expect(answers.map((a) => a.stopReason)).toEqual(["end_turn", "end_turn", "end_turn"]);
    expect([answerText(alpha.updates, sa), answerText(stdio.updates, sb), answerText(gamma.updates, sg)]).toEqual(["I am alpha", "I am beta", "I am gamma"]);
    // What each model call was sent: its agent's instructions alone, and its agent's tools alone.
    expect(server.requests.map((r) => whoIn(r)).sort()).toEqual([["alpha"], ["beta"], ["gamma"]]);
    for (const r of server.requests) {
      expect(r.headers.authorization, whoIn(r)[0]).toBe(`Bearer model-key-of-${whoIn(r)[0] ?? ""}`);
      const tools = ((r.body.tools ?? []) as { function: { name: string } }[]).map((t) => t.function.name);
      if (whoIn(r)[0] === "alpha") expect(tools).toContain("everything__echo");
      else expect(tools).toEqual([]);
    }
    // Each conversation is in its own agent's folder, and nowhere else.
    for (const a of agents) {
      const conv = paths({ dir: a.agent as string }).conversation("same-name");
      expect(readdirSync(conv.dir).filter((n) => /^\d{12}\.json$/.test(n)).length, a.name).toBe(2);
      expect(existsSync(join(a.files, "chats")), a.name).toBe(false);
    }
    // A second message in beta's conversation carries beta's history alone.
    server.fallback = (request) => ({ text: `seen ${request.body.messages?.length ?? 0} messages` });
    await stdio.agent.request(acp.methods.agent.session.prompt, { sessionId: sb, prompt: text("again"), _meta: beta.agent });
    expect(whoIn(server.requests.at(-1) as RecordedRequest)).toEqual(["beta"]);
    expect(JSON.stringify(server.requests.at(-1)?.body.messages)).not.toMatch(/I am alpha|I am gamma/);

    // A connection to one agent reaches nothing of another's.
    const only = async (c: Client, meta?: Record<string, unknown>) => {
      const listed: acp.ListSessionsResponse = await c.agent.request(acp.methods.agent.session.list, meta ? { _meta: meta } : {});
      return listed.sessions.map((s) => s.sessionId);
    };
    const sb2 = (await stdio.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [], _meta: beta.agent })).sessionId;
    await stdio.agent.request(acp.methods.agent.session.prompt, { sessionId: sb2, prompt: text("beta's own"), _meta: beta.agent });
    expect(await only(alpha)).toEqual(["same-name"]);
    expect((await only(stdio, beta.agent)).sort()).toEqual([sb2, "same-name"].sort());
    expect(await failure(alpha.agent.request(acp.methods.agent.session.load, { sessionId: sb2, cwd: "/", mcpServers: [] }))).toMatchObject({ code: -32002 });
    expect(await failure(alpha.agent.request(acp.methods.agent.session.list, { _meta: beta.agent }))).toMatchObject({ code: -32602, message: expect.stringContaining('serves the agent "alpha" alone') });

    // On stdio, a request names its agent, or is refused.
    expect(await failure(stdio.agent.request(acp.methods.agent.session.list, {}))).toMatchObject({ code: -32602, message: expect.stringContaining("name the agent this request is for: this process serves alpha, beta, gamma") });
    expect(await failure(stdio.agent.request(acp.methods.agent.session.list, { _meta: { link: { agent: "delta" } } }))).toMatchObject({ code: -32602, message: expect.stringContaining('serves no agent "delta"') });
    // The proof of an agent on stdio is made with its own key: gamma's, and alpha has none.
    const proved = (await stdio.agent.request("_link/prove", { challenge: "stdio-challenge-for-gamma", _meta: { link: { agent: "gamma" } } })) as { hmac: string };
    expect(proved.hmac).toBe(createHmac("sha256", GAMMA_KEY).update("stdio-challenge-for-gamma").digest("hex"));
    expect(await failure(stdio.agent.request("_link/prove", { challenge: "stdio-challenge-for-alpha", _meta: { link: { agent: "alpha" } } }))).toMatchObject({ code: -32600 });
    expect(d.stderr()).not.toContain(GAMMA_KEY);
    // Each agent's turns of its own "same-name" are told apart on the log, which all three write to.
    const turnsLogged = d
      .stderr()
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => z.looseObject({ msg: z.string(), thread: z.string().optional(), agent: z.string().optional() }).parse(JSON.parse(line)))
      .filter((l) => l.msg === "turn" && l.thread === "same-name");
    expect(new Set(turnsLogged.map((l) => l.agent))).toEqual(new Set(["alpha", "beta", "gamma"]));
  });

  it("refuses a file that is not SharedAgents, names one folder or name twice, or an agent without settings, and a port in use: one line, exit 2, nothing served", async () => {
    const { root, agents } = threeAgents();
    const linkToAlpha = join(root, "link-to-alpha");
    symlinkSync(join(agents[0]?.agent as string, ".."), linkToAlpha);
    const busy = await freePort();
    const blocker = watched(startDaemon(["--agent", agents[0]?.agent as string, "--port", String(busy)], linkFreeEnv()), cleanup);
    await servedPort(blocker);
    const cases: [string, unknown, RegExp][] = [
      ["not JSON", "{not json", /not JSON/],
      ["not a list", { name: "x" }, /not a SharedAgents list/],
      ["no agent", [], /names no agent/],
      ["a field unknown", [{ ...agents[0], extra: 1 }], /not a SharedAgents list/],
      ["one folder twice", [agents[0], { ...agents[1], agent: agents[0]?.agent }], /share a folder/],
      ["a folder inside another's", [agents[0], { ...agents[1], files: join(agents[0]?.agent as string, "inside") }], /share a folder/],
      // beta's folder named through a link to alpha's: one folder, two names.
      ["one folder through a link", [agents[0], { ...agents[1], agent: join(linkToAlpha, "own") }], /share a folder/],
      ["a files folder through a link", [agents[0], { ...agents[1], files: join(linkToAlpha, "own", "files-of-beta") }], /share a folder/],
      ["a folder inside another's, named before it", [{ ...agents[1], files: join(agents[0]?.agent as string, "a-b") }, agents[0]], /agents 0 and 1 share a folder/],
      ["one name twice", [agents[0], { ...agents[1], id: "alpha" }], /both called "alpha"/],
      ["one port twice", [{ ...agents[0], port: 4567 }, { ...agents[1], port: 4567 }], /both on port 4567/],
      ["a relative path", [{ ...agents[0], files: "files" }], /not an absolute path/],
      ["no settings", [{ ...agents[0], agent: join(root, "nowhere") }], /there is no agent at/],
      ["a port in use", [{ ...agents[1], port: busy }], new RegExp(`agent beta: port ${busy} on 127.0.0.1 is in use by another process: give it another port in the --agents file$`)],
      ["two owners", [agents[0], { ...agents[1], owner: "bob" }], /agents 0 and 1 are of two owners \("ada" and "bob"\): one process serves the agents of one owner/],
    ];
    for (const [what, content, said] of cases) {
      const file = join(root, `bad-${what.replace(/\W+/g, "-")}.json`);
      writeFileSync(file, typeof content === "string" ? content : JSON.stringify(content));
      const d = watched(startDaemon(["--agents", file], linkFreeEnv()), cleanup);
      const exit = await d.exited;
      expect(exit.code, what).toBe(2);
      const lines = d.stderr().trim().split("\n");
      expect(lines, what).toHaveLength(1);
      expect(lines[0], what).toMatch(said);
    }
    // Nothing was written for any agent.
    for (const a of agents) expect(existsSync(join(a.agent as string, "chats")), a.name).toBe(false);
  });
  it("on stdio, answers every agent's request that uses the id its initialize used, once that was answered", async () => {
    const { file } = threeAgents();
    const d = watched(startDaemon(["--agents", file], linkFreeEnv()), cleanup);
    const got: { id?: unknown; result?: unknown; error?: unknown }[] = [];
    createInterface({ input: d.child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
      got.push(z.object({ id: z.unknown(), result: z.unknown(), error: z.unknown() }).partial().loose().parse(JSON.parse(line)));
    });
    const send = (msg: object) => d.child.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", ...msg })}\n`);
    const answered = async (n: number) => {
      for (let i = 0; i < 400 && got.filter((m) => m.id === 1).length < n; i++) await new Promise((r) => setTimeout(r, 10));
      return got.filter((m) => m.id === 1);
    };
    send({ id: 1, method: "initialize", params: { protocolVersion: 1, clientCapabilities: {} } });
    expect(await answered(1)).toHaveLength(1);
    for (const [n, agent] of [[2, "alpha"], [3, "beta"], [4, "gamma"]] as const) {
      send({ id: 1, method: "session/list", params: { _meta: { link: { agent } } } });
      const answers = await answered(n);
      expect(answers, agent).toHaveLength(n);
      expect(answers.at(-1), agent).toMatchObject({ result: { sessions: [] } });
    }
  });

  it("on stdio, a request whose method is no name, and an initialize under no id, are answered once: -32600, or the one initialize's", async () => {
    const { file } = threeAgents();
    const d = watched(startDaemon(["--agents", file], linkFreeEnv()), cleanup);
    const got: { id?: unknown; result?: unknown; error?: { code?: unknown } }[] = [];
    createInterface({ input: d.child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
      got.push(z.object({ id: z.unknown(), result: z.unknown(), error: z.looseObject({ code: z.unknown() }) }).partial().loose().parse(JSON.parse(line)));
    });
    const send = (msg: object) => d.child.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", ...msg })}\n`);
    const initialize = { protocolVersion: 1, clientCapabilities: {} };
    send({ id: 1, method: "initialize", params: initialize });
    await until(() => got.some((a) => a.id === 1), "initialized");
    const cases: [string, object, (a: (typeof got)[number]) => boolean][] = [
      ["a number for a method", { id: 2, method: 7 }, (a) => a.error?.code === -32600],
      ["null for a method", { id: 3, method: null, params: {} }, (a) => a.error?.code === -32600],
      ["an object for a method, with no id", { method: { name: "session/list" } }, (a) => a.error?.code === -32600],
      ["an initialize under null", { id: null, method: "initialize", params: initialize }, (a) => a.id === null && a.result !== undefined],
      ["an initialize under an object", { id: { n: 1 }, method: "initialize", params: initialize }, (a) => a.error?.code === -32600],
    ];
    for (const [what, msg, answered] of cases) {
      const before = got.length;
      send(msg);
      // Then a request of each agent: once all three are answered, every answer to the line above is out.
      for (const agent of ["alpha", "beta", "gamma"]) send({ id: `after-${agent}`, method: "session/list", params: { _meta: { link: { agent } } } });
      await until(() => got.slice(before).filter((a) => typeof a.id === "string" && a.id.startsWith("after-")).length === 3, what);
      const answers = got.slice(before).filter((a) => !(typeof a.id === "string" && a.id.startsWith("after-")));
      expect(answers, what).toHaveLength(1);
      expect(answered(answers[0] as (typeof got)[number]), what).toBe(true);
    }
  });

  it("on stdio, one agent's requests piled up past the bound, its model stalled, hold up no other agent's; past the bound they are refused at once, naming the agent", { timeout: 60_000 }, async () => {
    const { file } = threeAgents();
    const d = watched(startDaemon(["--agents", file], linkFreeEnv()), cleanup);
    const stdio = await stdioClient(d, cleanup);
    const session = async (agent: string) => (await stdio.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [], _meta: { link: { agent, thread: "piled" } } })).sessionId;
    const [sa, sb] = [await session("alpha"), await session("beta")];
    const prompt = (sessionId: string, agent: string, words: string) =>
      stdio.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text(words), _meta: { link: { agent } } }) as Promise<acp.PromptResponse>;
    // alpha's model answers nothing until let go; beta's answers at once.
    let letGo!: () => void;
    const stalled = new Promise<void>((resolve) => (letGo = resolve));
    server.fallback = async (request) => {
      if (whoIn(request).includes("alpha")) await stalled;
      return { text: `I am ${whoIn(request).join(" and ")}` };
    };
    // More prompts of alpha than one connection's bound, all on stdin ahead of beta's: the first waits
    // on the model, and the others for the turn it runs.
    const over = 40;
    const piled = Array.from({ length: PENDING_MAX + over }, (_, n) =>
      prompt(sa, "alpha", `message ${n}`).then(
        (r) => ({ stopReason: r.stopReason }),
        (e: unknown) => ({ error: e as { code: number; message: string; data?: unknown } }),
      ),
    );
    const beta = prompt(sb, "beta", "who are you?");
    const late = new Promise<"late">((resolve) => setTimeout(() => resolve("late"), 15_000).unref());
    expect(await Promise.race([beta.then((r) => r.stopReason), late])).toBe("end_turn");
    expect(answerText(stdio.updates, sb)).toBe("I am beta");

    // alpha's past the bound were refused at once, each naming alpha and the bound; the rest wait.
    const settled: (Awaited<(typeof piled)[number]> | undefined)[] = piled.map(() => undefined);
    piled.forEach((p, n) => void p.then((r) => (settled[n] = r)));
    await until(() => settled.filter((r) => r !== undefined).length === over, `${over} of alpha's refused`);
    const refused = settled.filter((r) => r !== undefined);
    for (const r of refused) {
      expect(r).toMatchObject({ error: { code: -32603, data: { agent: "alpha", unanswered: PENDING_MAX } } });
      expect("error" in r ? r.error.message : "").toMatch(new RegExp(`agent "alpha" has ${PENDING_MAX} requests unanswered`));
    }
    // Its model answers: every one it took is answered.
    letGo();
    const all = await Promise.all(piled);
    expect(all.filter((r) => "stopReason" in r && r.stopReason === "end_turn")).toHaveLength(PENDING_MAX);
    expect(all.filter((r) => "error" in r)).toHaveLength(over);
    // With room again, alpha takes a prompt as before.
    expect((await prompt(sa, "alpha", "and now?")).stopReason).toBe("end_turn");
  });

  it("keeps memory's session per agent: two agents naming the same memory command each get a session of their own", async () => {
    const tmp = tempDir("lnk-shared-memory-");
    cleanup.push(() => tmp.remove());
    // One memory command, the same string for both, as Link's bridge might name it: memory's kept
    // session, shared, would answer one agent from the other's.
    const lore = join(tmp.path, "lore");
    mkdirSync(join(lore, "chats", "notes"), { recursive: true });
    writeFileSync(join(lore, "chats", "notes", "transcript.md"), "**Ada**: the gate code is 4417\n");
    const memory = `"${process.execPath}" "${join(ROOT, "dist/test/memory-server.js")}" "${lore}"`;
    const agents = (["alpha", "beta"] as const).map((name) => {
      const own = join(tmp.path, name, "own");
      configure(own, scriptedSettings(server.url));
      return { name, id: `${name}-id`, owner: "ada", home: join(tmp.path, name), files: own, agent: own, port: 0, env: { LNK_MEMORY: memory } };
    });
    const file = join(tmp.path, "agents.json");
    writeFileSync(file, JSON.stringify(agents));
    const d = watched(startDaemon(["--agents", file], linkFreeEnv()), cleanup);
    const stdio = await stdioClient(d, cleanup);
    server.fallback = (request) => {
      const last = request.body.messages?.at(-1);
      if (last?.role === "tool") return { text: /4417/.test(String(last.content)) ? "found 4417" : "found nothing" };
      return { tool_calls: [{ name: "memory__search", arguments: { query: "gate code" } }] };
    };
    for (const name of ["alpha", "beta"]) {
      const meta = { link: { agent: name } };
      const { sessionId } = await stdio.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [], _meta: meta });
      expect(await stdio.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("the gate code?"), _meta: meta })).toMatchObject({ stopReason: "end_turn" });
      expect(answerText(stdio.updates, sessionId), name).toBe("found 4417");
    }
    // Each agent's memory is a process of its own, kept for it: two, not one shared.
    const memories = readdirSync("/proc")
      .filter((pid) => /^\d+$/.test(pid))
      .filter((pid) => {
        try {
          const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
          const parent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
          return parent === d.child.pid && readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("memory-server.js");
        } catch {
          return false;
        }
      });
    expect(memories).toHaveLength(2);
  });
});
