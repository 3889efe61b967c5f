// The agent's folder, fuzzed: FIFOs, links to a secret file of the machine, hard links to it, dangling
// links, sparse 1.5 GB files and folders planted where the store reads or writes (or looks for what a
// gone process left), some of them while a turn runs (a conversation folder swapped for a link
// mid-turn). Each time the daemon answers the prompt (an answer or a JSON-RPC error), goes on
// answering, stops on SIGTERM, never sends the secret to the model, a log line or a client, and
// changes nothing outside the agent's folder. Half the
// time the model refuses the key and echoes it back: the key reaches no log line, client or event.
import { spawnSync } from "node:child_process";
import { existsSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, sep } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeSettings } from "../store/index.js";
import { answerText, openClient, scriptedSettings, startDaemon, stdioStream } from "./acp-client.js";
import { assertBuilt, BIN } from "./fixtures/built.js";
import { deferred } from "./fixtures/deferred.js";
import { startModelServer, type ModelServer } from "./model-server.js";

const ANSWER_MS = 20_000;
const THREAD = "t";

/** Where a thing is planted, relative to the agent's folder. */
const WHERE = [
  "config.json",
  "instructions",
  "instructions/instruction.md",
  "memory/notes.md",
  "skills",
  "skills/s",
  "skills/s/SKILL.md",
  "chats",
  `chats/${THREAD}`,
  `chats/${THREAD}/000000000001.json`,
  // The number the turn's answer would take, found taken: its link passes over it (EEXIST), and what
  // is there is read by nothing that could follow it.
  `chats/${THREAD}/000000000002.json`,
  // Past a number missing: the turn is refused, naming it, rather than written where none reads.
  `chats/${THREAD}/000000000004.json`,
  `chats/${THREAD}/window.json`,
  `chats/${THREAD}/transcript.md`,
  `chats/${THREAD}/tools.json`,
  `chats/${THREAD}/.lock`,
  // Named as a gone process's holder and temporary file (a pid past any a process has): the look for
  // what gone processes left removes names in the folder, never what they lead to.
  `chats/${THREAD}/.holder-9999999999-0123456789ab-01234567`,
  `chats/${THREAD}/.tmp-9999999999-0123456789ab-x-1`,
] as const;
const WHAT = ["fifo", "socket", "link to the secret", "hard link to the secret", "dangling link", "link to a folder outside", "sparse file", "folder"] as const;

interface Planting {
  where: (typeof WHERE)[number];
  what: (typeof WHAT)[number];
  /** Planted while the turn waits on the model, rather than before the prompt. */
  during: boolean;
}

const planting: fc.Arbitrary<Planting> = fc.record({ where: fc.constantFrom(...WHERE), what: fc.constantFrom(...WHAT), during: fc.boolean() });

let outer: string;
let secret: string;
let elsewhere: string;
let server: ModelServer;
const SECRET = `SECRET-${Math.random().toString(36).slice(2)}-must-never-leave`;
/** The model's key, in the settings: an endpoint that refuses it echoes it back, and it must go no further. */
const KEY = `sk-fuzz-${Math.random().toString(36).slice(2)}-key`;

/** Every file's text under the agent's chats/ that is a regular file of one name (not a planted hard link). */
function chatsText(agent: string): string {
  let out = "";
  const walk = (dir: string) => {
    for (const d of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, d.name);
      if (d.isDirectory()) walk(path);
      else if (d.isFile() && statSync(path).nlink === 1 && statSync(path).size < 1024 * 1024) out += readFileSync(path, "utf8");
    }
  };
  const chats = join(agent, "chats");
  if (lstatSync(chats, { throwIfNoEntry: false })?.isDirectory()) walk(chats);
  return out;
}

/** Every file under `root` (but `skip`), with its size and time, and every folder. */
function listing(root: string, skip: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const d of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, d.name);
      if (path === skip || path.startsWith(`${skip}${sep}`)) continue;
      if (d.isDirectory()) {
        out.push(`${relative(root, path)}${sep}`);
        walk(path);
      } else out.push(`${relative(root, path)} ${statSync(path, { throwIfNoEntry: false })?.size}`);
    }
  };
  walk(root);
  return out.sort();
}

/** Makes room at `path` (moving what is there aside, inside the agent's folder) and plants `what`. */
function plant(agent: string, p: Planting): void {
  const path = join(agent, p.where);
  // A planting before this one put a link or a file where a folder on the way would be: that one
  // stands, and nothing is made through it (the test must not write outside itself either).
  let at = agent;
  for (const part of relative(agent, dirname(path)).split(sep).filter(Boolean)) {
    at = join(at, part);
    const st = lstatSync(at, { throwIfNoEntry: false });
    if (st === undefined) mkdirSync(at);
    else if (!st.isDirectory()) return;
  }
  // The daemon may write that very path meanwhile (an event it links during the turn): then what it
  // wrote is moved aside too, and the planting made again.
  for (let attempt = 0; ; attempt++) {
    try {
      renameSync(path, join(agent, `.aside-${Math.random().toString(36).slice(2)}`));
    } catch {
      // nothing there
    }
    try {
      make(path, p.what);
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST" || attempt >= 5) throw e;
    }
  }
}

/** Makes `what` at `path`, which is free: EEXIST when something took it first. */
function make(path: string, what: Planting["what"]): void {
  switch (what) {
    case "fifo": {
      const made = spawnSync("mkfifo", [path], { encoding: "utf8" });
      if (made.status !== 0 && existsSync(path)) throw Object.assign(new Error(made.stderr), { code: "EEXIST" });
      expect(made.status).toBe(0);
      return;
    }
    case "socket": {
      // Bound by a process that exits at once, leaving the socket file: one no open can read (ENXIO).
      const made = spawnSync(process.execPath, ["-e", "require('node:net').createServer().listen(process.argv[1], () => process.exit(0))", path], { encoding: "utf8" });
      if (made.status !== 0 && existsSync(path)) throw Object.assign(new Error(made.stderr), { code: "EEXIST" });
      expect(made.status, made.stderr).toBe(0);
      return;
    }
    case "link to the secret":
      symlinkSync(secret, path);
      return;
    case "hard link to the secret":
      linkSync(secret, path);
      return;
    case "dangling link":
      symlinkSync(join(elsewhere, "nothing-here"), path);
      return;
    case "link to a folder outside":
      symlinkSync(elsewhere, path);
      return;
    case "sparse file":
      writeFileSync(path, '{"v":1,"note":"sparse"', { flag: "wx" });
      truncateSync(path, 1.5 * 1024 ** 3);
      return;
    case "folder":
      mkdirSync(path);
      return;
    default: {
      const never: never = what;
      throw new Error(`unknown planting ${String(never)}`);
    }
  }
}

beforeAll(async () => {
  assertBuilt([BIN, "dist/acp/app.js", "dist/store/index.js"], ["acp", "daemon", "turn", "store", "protocol"]);
  outer = mkdtempSync(join(tmpdir(), "lnk-fuzz-folder-"));
  secret = join(outer, "secret.txt");
  // Ending as a conversation's copy ends (its last answer's mark): a copy that is a hard link to it
  // would be added to, were the link not refused.
  writeFileSync(secret, `${SECRET}\n<!-- answer 0 -->\n\n`, { mode: 0o600 });
  elsewhere = join(outer, "elsewhere");
  mkdirSync(elsewhere);
  server = await startModelServer();
});

afterAll(async () => {
  await server?.close();
  if (outer) rmSync(outer, { recursive: true, force: true });
});

async function check(plantings: Planting[], echoKey: boolean): Promise<void> {
  const agent = mkdtempSync(join(outer, "agent-"));
  const settings = scriptedSettings(server.url);
  writeSettings({ dir: agent }, { ...settings, model: { ...(settings.model as object), key: KEY } } as Parameters<typeof writeSettings>[1]);
  const before = listing(outer, agent);
  const requests = server.requests.length;
  const d = startDaemon(["--agent", agent]);
  const go = deferred();
  try {
    const c = await openClient(stdioStream(d.child));
    await c.agent.request(acp.methods.agent.session.new, { cwd: agent, mcpServers: [], _meta: { link: { thread: THREAD } } });
    for (const p of plantings.filter((x) => !x.during)) plant(agent, p);
    const asked = deferred();
    server.script(async () => {
      asked.resolve();
      await go.promise;
      return echoKey ? { error: { status: 401, message: "Incorrect API key provided", code: "invalid_api_key", echoAuthorization: true } } : { text: "an answer" };
    });
    const turn = c.agent.request(acp.methods.agent.session.prompt, { sessionId: THREAD, prompt: [{ type: "text", text: "hello" }] }).then(
      (r) => ({ result: r.stopReason as string }),
      (e: unknown) => ({ error: (e as { code?: number; message?: string }).message ?? String(e) }),
    );
    // The turn asks the model, or ends before it (refused): either way, plant what comes during it.
    await Promise.race([asked.promise, turn]);
    for (const p of plantings.filter((x) => x.during)) plant(agent, p);
    go.resolve();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("the prompt was not answered")), ANSWER_MS)));
    const outcome = await Promise.race([turn, late]).finally(() => clearTimeout(timer));
    expect(JSON.stringify(outcome)).not.toContain(SECRET);
    expect(JSON.stringify(outcome)).not.toContain(KEY);
    // Still answering (a list, or an error saying why there is none), and nothing of the secret went anywhere.
    const list = await c.agent.request(acp.methods.agent.session.list, {}).then(
      (r) => JSON.stringify(r),
      (e: unknown) => String((e as { message?: string }).message),
    );
    expect(list).not.toContain(SECRET);
    expect(answerText(c.updates)).not.toContain(SECRET);
    expect(JSON.stringify(c.updates)).not.toContain(KEY);
    for (const r of server.requests.slice(requests)) expect(JSON.stringify(r.body)).not.toContain(SECRET);
    c.close();
    expect(await d.stop("SIGTERM")).toEqual({ code: 0, signal: null });
    expect(d.stderr()).not.toContain(SECRET);
    expect(d.stderr()).not.toContain(KEY);
    expect(chatsText(agent)).not.toContain(KEY);
    expect(listing(outer, agent)).toEqual(before);
  } finally {
    go.resolve();
    await d.stop("SIGKILL");
    // The scripted reply of a turn that never asked the model is dropped.
    while (server.pending > 0) await dropPending();
    rmSync(agent, { recursive: true, force: true });
  }
}

/** Takes a scripted reply no turn took, so the next run's turn gets its own. */
async function dropPending(): Promise<void> {
  await fetch(`${server.url}/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "x", messages: [] }) })
    .then((r) => r.text())
    .catch(() => undefined);
}

describe("the agent's folder, fuzzed", () => {
  it("FIFOs, links, hard links, sparse files and folders where files should be, before or during a turn, and a key echoed back", { timeout: 240_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(planting, { minLength: 1, maxLength: 3 }), fc.boolean(), (ps, echoKey) => check(ps, echoKey)),
      // The copy a hard link to the secret, a gone process's holder and temporary file links out, and
      // the answer's number taken, whatever else comes: always run first.
      {
        numRuns: 24,
        examples: [
          [[{ where: `chats/${THREAD}/transcript.md`, what: "hard link to the secret", during: false }], false],
          [
            [
              { where: `chats/${THREAD}/.holder-9999999999-0123456789ab-01234567`, what: "link to a folder outside", during: false },
              { where: `chats/${THREAD}/.tmp-9999999999-0123456789ab-x-1`, what: "hard link to the secret", during: false },
            ],
            false,
          ],
          // The answer's number taken while the model answers, by a link out; or before, by a FIFO.
          [[{ where: `chats/${THREAD}/000000000002.json`, what: "link to the secret", during: true }], false],
          [[{ where: `chats/${THREAD}/000000000002.json`, what: "fifo", during: false }], false],
        ],
      },
    );
  });
});
