// A folder made on the way to what is written is flushed before that write is acknowledged: a
// file's name is on disk once its folder is flushed, and that folder's own name once the folder it
// was made in is. The flushes are seen as the process makes them: Node's own fsync, wrapped to note
// which folder each descriptor is, and still called.
import fs, { mkdirSync, readlinkSync, symlinkSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { appendEvent, ensureConversation, paths, writeSettings, type AgentRef } from "../store/index.js";
import { checkState, planImport } from "../asp/state-import.js";
import { runTurn } from "../turn/turn.js";
import { scratch } from "./fixtures/scratch.js";

const real = { fsync: fs.fsync, fsyncSync: fs.fsyncSync, fdatasync: fs.fdatasync, fdatasyncSync: fs.fdatasyncSync, renameSync: fs.renameSync, linkSync: fs.linkSync };
/**
 * The paths of what was flushed (fsync) since the test began, in order, and each rename as `renamed <to>`;
 * with `data`, each file's data flush (fdatasync) as `data <path>` and each link as `linked <to>`,
 * and ` on the loop` after a flush made on the event loop.
 */
let flushed: string[] = [];
/** Runs as a flush (fsync off the event loop) of `path` begins: what another turn does meanwhile. */
let duringFlush: ((path: string) => void) | undefined;
const pathOf = (fd: number): string => {
  try {
    return readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return `fd ${fd}`;
  }
};

beforeEach(() => {
  flushed = [];
  fs.fsync = ((fd: number, cb: (err: NodeJS.ErrnoException | null) => void) => {
    const path = pathOf(fd);
    flushed.push(path);
    duringFlush?.(path);
    real.fsync(fd, cb);
  }) as typeof fs.fsync;
  fs.fsyncSync = ((fd: number) => {
    flushed.push(pathOf(fd));
    real.fsyncSync(fd);
  }) as typeof fs.fsyncSync;
  fs.renameSync = ((from: fs.PathLike, to: fs.PathLike) => {
    real.renameSync(from, to);
    flushed.push(`renamed ${String(to)}`);
  }) as typeof fs.renameSync;
  syncBuiltinESMExports();
});
afterEach(() => {
  duringFlush = undefined;
  Object.assign(fs, real);
  syncBuiltinESMExports();
});

/** Notes each file's data flush and each link too, and which flushes are made on the event loop. */
function noteData(): void {
  fs.fsyncSync = ((fd: number) => {
    flushed.push(`${pathOf(fd)} on the loop`);
    real.fsyncSync(fd);
  }) as typeof fs.fsyncSync;
  fs.fdatasync = ((fd: number, cb: (err: NodeJS.ErrnoException | null) => void) => {
    flushed.push(`data ${pathOf(fd)}`);
    real.fdatasync(fd, cb);
  }) as typeof fs.fdatasync;
  fs.fdatasyncSync = ((fd: number) => {
    flushed.push(`data ${pathOf(fd)} on the loop`);
    real.fdatasyncSync(fd);
  }) as typeof fs.fdatasyncSync;
  fs.linkSync = ((from: fs.PathLike, to: fs.PathLike) => {
    real.linkSync(from, to);
    flushed.push(`linked ${String(to).replace(/^\/proc\/self\/fd\/\d+/, "")}`);
  }) as typeof fs.linkSync;
  syncBuiltinESMExports();
}

const { server, folder } = scratch("lh-durable-");

const event = (text: string) => ({ v: 1 as const, kind: "command" as const, time: new Date().toISOString(), name: "/new" as const, text });

describe("folders made on the way are on disk before what is written in them is acknowledged", () => {
  it("an event in a new conversation of an agent with no chats/ yet: the agent's folder, chats/ and the conversation's, each once", async () => {
    const agent: AgentRef = { dir: folder() };
    const conv = paths(agent).conversation("fresh");
    await appendEvent(conv, event("one"));
    expect(flushed).toContain(agent.dir);
    expect(flushed).toContain(paths(agent).chats);
    expect(flushed).toContain(conv.dir);
    // Once each: the next event flushes its own folder only.
    flushed = [];
    await appendEvent(conv, event("two"));
    expect(flushed).toEqual([conv.dir]);
    // A second conversation: chats/ again (a name was made in it), never the agent's folder.
    const other = paths(agent).conversation("other");
    await appendEvent(other, event("three"));
    expect(flushed).toContain(paths(agent).chats);
    expect(flushed).toContain(other.dir);
    expect(flushed).not.toContain(agent.dir);
  });

  it("a conversation made in chats/ while chats/ is being flushed for another: chats/ is flushed again for it", async () => {
    const agent: AgentRef = { dir: folder() };
    const chats = paths(agent).chats;
    const other = paths(agent).conversation("other");
    // As the first conversation's write flushes chats/, a second conversation's folder is made in it.
    duringFlush = (path) => {
      if (path !== chats) return;
      duringFlush = undefined;
      ensureConversation(other);
    };
    await appendEvent(paths(agent).conversation("first"), event("one"));
    flushed = [];
    await appendEvent(other, event("two"));
    expect(flushed).toContain(chats);
    expect(flushed).toContain(other.dir);
  });

  it("settings written into a folder made for them: the file, its folder and the folder it was made in", () => {
    const root = folder();
    const agent: AgentRef = { dir: join(root, "agents", "new") };
    writeSettings(agent, { model: { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1" } });
    // After config.json took its name: its folder, and the folders it was made in.
    const renamed = flushed.indexOf(`renamed ${paths(agent).config}`);
    expect(renamed).toBeGreaterThan(-1);
    const after = flushed.slice(renamed + 1);
    expect(after).toContain(agent.dir);
    expect(after).toContain(join(root, "agents"));
    expect(after).toContain(root);
  });

  it("an imported skill: its files, its folder, and its name in skills/ once it is put in place", async () => {
    const agent: AgentRef = { dir: folder() };
    writeSettings(agent, { model: { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1" } });
    flushed = [];
    const plan = planImport(agent, checkState({ skills: [{ name: "triage", files: { "SKILL.md": "---\nname: triage\n---\nSort.\n" } }] }));
    await plan.write();
    const skills = join(agent.dir, "skills");
    // skills/ is flushed after the skill's folder was renamed into it.
    const renamed = flushed.indexOf(`renamed ${join(skills, "triage")}`);
    expect(renamed).toBeGreaterThan(-1);
    expect(flushed.slice(renamed + 1)).toContain(skills);
    // And the agent's folder, where skills/ was made.
    expect(flushed).toContain(agent.dir);
  });

  it("an agent's folder that is a link, as the person named it: written and flushed through it, the folder it names flushed", async () => {
    const root = folder();
    const real = join(root, "real");
    mkdirSync(real);
    symlinkSync(real, join(root, "named"));
    const agent: AgentRef = { dir: join(root, "named") };
    writeSettings(agent, { model: { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1" } });
    expect(flushed.slice(flushed.indexOf(`renamed ${paths(agent).config}`) + 1)).toContain(real);
    flushed = [];
    await appendEvent(paths(agent).conversation("fresh"), event("one"));
    expect(flushed).toContain(real);
    expect(flushed).toContain(join(real, "chats"));
    expect(flushed).toContain(join(real, "chats", "fresh"));
  });

  it("a first turn in a new conversation: its folders are flushed before the turn says it is done", async () => {
    const agent: AgentRef = { dir: folder() };
    writeSettings(agent, { model: { provider: "test", name: "scripted-1", base_url: server().url } });
    flushed = [];
    const outcome = await runTurn({ agent, thread: "first", message: { text: "hello" } }, () => undefined);
    expect(outcome.stop).toBe("end_turn");
    expect(flushed).toContain(paths(agent).chats);
    expect(flushed).toContain(agent.dir);
    expect(flushed).toContain(paths(agent).conversation("first").dir);
  });

  it("a first turn in a new conversation: the folders made for it are flushed while the model is asked, not after its answer", async () => {
    const agent: AgentRef = { dir: folder() };
    writeSettings(agent, { model: { provider: "test", name: "scripted-1", base_url: server().url } });
    noteData();
    flushed = [];
    let asked: string[] = [];
    const fallback = server().fallback;
    server().fallback = (req) => {
      asked = [...flushed];
      return fallback(req);
    };
    try {
      expect((await runTurn({ agent, thread: "early", message: { text: "hello" } }, () => undefined)).stop).toBe("end_turn");
    } finally {
      server().fallback = fallback;
    }
    // Begun while the model was asked: chats/ (a new name in it) and the agent's folder are flushed
    // before the answer's data is. (Whether their flush reached the thread pool before the request
    // reached the model depends on the machine's load, so that is not asked.)
    let answerData = -1;
    flushed.forEach((f, i) => {
      if (f.startsWith("data ")) answerData = i;
    });
    expect(answerData).toBeGreaterThan(-1);
    for (const dir of [paths(agent).chats, agent.dir]) {
      expect(flushed).toContain(dir);
      expect(flushed.indexOf(dir)).toBeLessThan(answerData);
    }
    // The conversation's own folder is flushed at the end, once.
    expect(asked).not.toContain(paths(agent).conversation("early").dir);
  });
});

describe("a turn's answer is on disk before the turn answers", () => {
  /** The flushes of one turn of `thread` after its first: the data and name of each event, in order. */
  async function steadyTurn(agent: AgentRef, thread: string): Promise<string[]> {
    expect((await runTurn({ agent, thread, message: { text: "first" } }, () => undefined, { early: true })).stop).toBe("end_turn");
    flushed = [];
    expect((await runTurn({ agent, thread, message: { text: "again" } }, () => undefined, { early: true })).stop).toBe("end_turn");
    return flushed;
  }

  it("the only conversation being written: the answer's data, then its link, then the folder, flushed on the event loop", async () => {
    const agent: AgentRef = { dir: folder() };
    writeSettings(agent, { model: { provider: "test", name: "scripted-1", base_url: server().url } });
    noteData();
    const seen = await steadyTurn(agent, "alone");
    const dir = paths(agent).conversation("alone").dir;
    // The question is flushed in the thread pool (the model is asked meanwhile); the answer, which
    // the turn waits for, on the loop, before its name is linked; the folder once, after both links.
    const answerData = seen.findIndex((f) => f.startsWith(`data ${dir}/.tmp-`) && f.endsWith(" on the loop"));
    const answerLink = seen.indexOf("linked /000000000004.json");
    const folderFlush = seen.indexOf(`${dir} on the loop`);
    expect(seen.filter((f) => f.startsWith("data ") && !f.endsWith(" on the loop"))).toHaveLength(1);
    expect(answerData).toBeGreaterThan(-1);
    expect(answerLink).toBeGreaterThan(answerData);
    expect(seen.indexOf("linked /000000000003.json")).toBeGreaterThan(-1);
    expect(folderFlush).toBeGreaterThan(Math.max(answerLink, seen.indexOf("linked /000000000003.json")));
  });

  it("two conversations written at once: what the first to answer flushes, while the other is written, is flushed in the thread pool", async () => {
    const agent: AgentRef = { dir: folder() };
    writeSettings(agent, { model: { provider: "test", name: "scripted-1", base_url: server().url } });
    for (const thread of ["one", "two"]) await runTurn({ agent, thread, message: { text: "first" } }, () => undefined, { early: true });
    noteData();
    flushed = [];
    // The model answers each only once both have asked: both turns hold their conversation's lock
    // from before either answer comes until after the first has answered.
    let asked = 0;
    let both!: () => void;
    const met = new Promise<void>((resolve) => (both = resolve));
    const together = async () => {
      if (++asked === 2) both();
      await met;
      return { text: "together" };
    };
    server().script(together, together);
    /** How much had been flushed when the first turn answered: its answer and its folder, by then. */
    let firstAnswered = -1;
    const outcomes = await Promise.all(
      ["one", "two"].map((thread) =>
        runTurn({ agent, thread, message: { text: "again" } }, () => undefined, { early: true }).then((outcome) => {
          if (firstAnswered < 0) firstAnswered = flushed.length;
          return outcome;
        }),
      ),
    );
    expect(outcomes.map((o) => o.stop)).toEqual(["end_turn", "end_turn"]);
    const dirs = ["one", "two"].map((thread) => paths(agent).conversation(thread).dir);
    const first = flushed.slice(0, firstAnswered);
    // The first to answer: its question's and its answer's data, and its folder, flushed by then...
    const firstDir = dirs.find((dir) => first.includes(dir) || first.includes(`${dir} on the loop`));
    expect(firstDir).toBeDefined();
    expect(first.filter((f) => f.startsWith(`data ${firstDir}/`))).toHaveLength(2);
    // ...each in the thread pool, as the other conversation was being written all along.
    expect(first.filter((f) => f.endsWith(" on the loop"))).toEqual([]);
    // The other's are all made by the end, in the pool or, once it is written alone, on the loop.
    for (const dir of dirs) {
      expect(flushed.filter((f) => f.startsWith(`data ${dir}/`))).toHaveLength(2);
      expect(flushed.includes(dir) || flushed.includes(`${dir} on the loop`)).toBe(true);
    }
  });
});
