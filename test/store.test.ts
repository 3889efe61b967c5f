// The store on disk: numbered events under many writers, the conversation lock across processes,
// names, files that fail their schema, links, and the derived files beside the events.
import { spawnSync } from "node:child_process";
import { appendFileSync, existsSync, linkSync, lstatSync, lutimesSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import fc from "fast-check";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { EVENT_VERSION, Event, StoreError, Thread, type WindowMark } from "../protocol/index.js";
import {
  InvalidNameError,
  conversationIn,
  listSkills,
  listOwed,
  lockedElsewhere,
  appendEvent,
  appendEventAfter,
  appendTranscript,
  cachedEventBytes,
  ensureConversation,
  eventName,
  forgetEvents,
  lastEventNumber,
  listEventNumbers,
  isThread,
  listThreads,
  narrowToolsList,
  paths,
  readEvent,
  readEventsFrom,
  readMark,
  readNotes,
  readSettings,
  readStanding,
  readToolsList,
  readTranscript,
  removeOwed,
  replaceTranscript,
  transcriptTail,
  withConversationLock,
  sweepsSettled,
  LockLostError,
  writeMark,
  writeOwed,
  claimOwed,
  messageTag,
  type Owed,
  type ConversationPaths,
  writeSettings,
  beginEvent,
  prepareEvent,
  makeSpares,
  dropSpares,
  sparesKept,
  SPARE_CONVERSATIONS,
} from "../store/index.js";
import { LIMITS } from "../store/files.js";
import { ROOT, assertBuilt } from "./fixtures/built.js";
import { Child, killAll } from "./fixtures/child.js";

const WORKER = join(ROOT, "dist/test/fixtures/append-worker.js");

const temps: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "lnk-store-"));
  temps.push(dir);
  return dir;
}

function worker(...args: string[]): Child {
  return new Child(process.execPath, [WORKER, ...args]);
}

/** One conversation named by two paths: its agent's folder, and a link to it. Made. */
function onePlaceTwoPaths(thread: string): [ConversationPaths, ConversationPaths] {
  const real = tempDir();
  const alias = join(tempDir(), "alias");
  symlinkSync(real, alias);
  const first = paths({ dir: real }).conversation(thread);
  ensureConversation(first);
  return [first, paths({ dir: alias }).conversation(thread)];
}

/** The pid of a process that has ended: it names no one (or someone else, whom a lock doesn't name by host). */
function gonePid(): number {
  return Number(spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" }).stdout);
}

function userMessage(text: string): Event {
  return { v: EVENT_VERSION, time: new Date().toISOString(), kind: "message", role: "user", text, header: "test" };
}

afterEach(async () => {
  await killAll();
  for (const dir of temps.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("many processes on one conversation", () => {
  beforeAll(() => assertBuilt(["dist/test/fixtures/append-worker.js", "dist/store/index.js"], ["store", "protocol", "test/fixtures/append-worker.ts"]));

  it("8 processes appending 50 events each number them 1..400, each whole, none lost or doubled", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("telegram-12345");
    const workers = Array.from({ length: 8 }, (_, w) => worker("append", dir, conv.thread, `w${w}`, "50"));
    await Promise.all(workers.map((w) => w.line((l) => l === "ready")));
    for (const w of workers) w.send("go\n");
    const exits = await Promise.all(workers.map((w) => w.exit(30_000)));
    for (const [i, e] of exits.entries()) expect(e, workers[i]?.stderr).toEqual({ code: 0, signal: null });

    const names = readdirSync(conv.dir).sort();
    expect(names.filter((n) => n.startsWith(".tmp-")), "temp files left behind").toEqual([]);
    const eventFiles = names.filter((n) => /^\d{12}\.json$/.test(n));
    expect(eventFiles).toEqual(Array.from({ length: 400 }, (_, i) => eventName(i + 1)));

    // Each file read raw and parsed whole, not through this process's cache.
    const texts = eventFiles.map((n) => {
      const parsed = Event.parse(JSON.parse(readFileSync(join(conv.dir, n), "utf8")));
      if (parsed.kind !== "message") throw new Error(`${n} is a ${parsed.kind}`);
      return parsed.text;
    });
    expect(new Set(texts).size).toBe(400);
    for (let w = 0; w < 8; w++) {
      // Every event of the worker, in the order it wrote them.
      expect(texts.filter((t) => t.startsWith(`w${w}:`))).toEqual(Array.from({ length: 50 }, (_, i) => `w${w}:${i}`));
    }
    expect(readEventsFrom(conv, 1).map((e) => e.n)).toEqual(Array.from({ length: 400 }, (_, i) => i + 1));
    expect(lastEventNumber(conv)).toBe(400);
  });

  it("two processes holding one conversation's lock never overlap", async () => {
    const dir = tempDir();
    const log = join(dir, "lock.log");
    const conv = paths({ dir }).conversation("shared");
    const workers = ["A", "B"].map((id) => worker("lock", dir, conv.thread, id, "20", log));
    await Promise.all(workers.map((w) => w.line((l) => l === "ready")));
    for (const w of workers) w.send("go\n");
    const exits = await Promise.all(workers.map((w) => w.exit(30_000)));
    for (const [i, e] of exits.entries()) expect(e, workers[i]?.stderr).toEqual({ code: 0, signal: null });

    const lines = readFileSync(log, "utf8").trim().split("\n");
    const held = lines.filter((l) => !l.startsWith("want "));
    expect(held).toHaveLength(80);
    // Inside the lock, strictly one at a time: each enter is followed by its own leave.
    for (let i = 0; i < held.length; i += 2) {
      const enter = held[i] ?? "";
      expect(enter).toMatch(/^enter /);
      expect(held[i + 1]).toBe(enter.replace(/^enter/, "leave"));
    }
    // And they did contend: one of them waited while the other held the lock.
    const waited = lines.some((l, i) => {
      const m = /^want (\S+) (\d+)$/.exec(l);
      if (!m) return false;
      const entered = lines.indexOf(`enter ${m[1]} ${m[2]}`, i);
      return lines.slice(i, entered).some((between) => between.startsWith("leave ") && !between.startsWith(`leave ${m[1]} `));
    });
    expect(waited, lines.join("\n")).toBe(true);
  });

  it("a live holder keeps its lock past the stale period (2000 ms)", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("held");
    const holder = worker("hold", dir, conv.thread);
    await holder.line((l) => l === "held");
    // Twice the stale period: the holder refreshes its lock, so another process never gets it.
    const other = worker("take", dir, conv.thread, "4000");
    expect(await other.line((l) => l.startsWith("acquired ") || l === "busy")).toBe("busy");
    expect((await other.exit()).code).toBe(3);
    expect(holder.proc.exitCode, "the holder is still running").toBeNull();
    holder.proc.kill("SIGKILL");
    await holder.exit();
  }, 20_000);

  it("a copy made with hard links (cp -al) of a folder while a live process held it is not held: its lock is taken at once, the original's left held", async () => {
    const dir = tempDir();
    const original = paths({ dir }).conversation("original");
    const holder = worker("hold", dir, original.thread);
    await holder.line((l) => l === "held");
    const copy = paths({ dir }).conversation("copy");
    expect(spawnSync("cp", ["-al", original.dir, copy.dir]).status).toBe(0);
    // The copy's lock is a name of the live holder, which the holding process keeps fresh.
    expect(lstatSync(copy.lock).ino).toBe(lstatSync(original.lock).ino);
    const t0 = Date.now();
    let held = false;
    await withConversationLock(copy, async () => {
      held = true;
    }, { stale: 2_000, wait: 5_000 });
    expect(held).toBe(true);
    // At once, not once stale (the holder's time is kept fresh: it never would be).
    expect(Date.now() - t0).toBeLessThan(1_500);
    await sweepsSettled();
    expect(holder.proc.exitCode, "the original's holder is still running").toBeNull();
    const originalHolder = readdirSync(original.dir).filter((n) => n.startsWith(`.holder-${holder.proc.pid}-`));
    expect(originalHolder).toHaveLength(1);
    expect(lstatSync(original.lock).ino).toBe(lstatSync(join(original.dir, String(originalHolder[0]))).ino);
    // The copy's name of the other process's holder went with the look for gone processes' holders.
    expect(readdirSync(copy.dir).filter((n) => n.startsWith(`.holder-${holder.proc.pid}-`))).toEqual([]);
    // The original stays held.
    const other = worker("take", dir, original.thread, "300");
    expect(await other.line((l) => l.startsWith("acquired ") || l === "busy")).toBe("busy");
    await other.exit();
    holder.proc.kill("SIGKILL");
    await holder.exit();
    // A prompt owed in a folder copied meanwhile is that folder's, not the copy's.
    const owing = paths({ dir }).conversation("owing");
    ensureConversation(owing);
    const owedCopy = paths({ dir }).conversation("owing-copy");
    let owedAs = "";
    await withConversationLock(owing, async () => {
      owedAs = writeOwed(owing, `owed-${process.pid}-00000000000000aa`, 0);
      expect(spawnSync("cp", ["-al", owing.dir, owedCopy.dir]).status).toBe(0);
    });
    expect(existsSync(join(owedCopy.dir, owedAs))).toBe(true);
    expect(listOwed({ dir }).owed.map((o) => [o.thread, o.name])).toEqual([["owing", owedAs]]);
    // A live lock naming another folder of this file system, with no name outside this one (a file
    // system whose folders' numbers change over time): not a copy's, and left.
    const renumbered = paths({ dir }).conversation("renumbered");
    ensureConversation(renumbered);
    const here = lstatSync(renumbered.dir);
    const liveHolder = join(renumbered.dir, `.holder-${process.ppid}-0123456789ab-01234567`);
    writeFileSync(liveHolder, JSON.stringify({ pid: process.ppid, host: hostname(), token: "t", folder: `${here.dev}:${here.ino + 1}` }), { mode: 0o600 });
    linkSync(liveHolder, renumbered.lock);
    await expect(withConversationLock(renumbered, async () => undefined, { stale: 60_000, wait: 500 })).rejects.toThrow(/busy/);
    // Another machine's lock naming another folder is left: that machine numbers a shared file system's devices its own way.
    const shared = paths({ dir }).conversation("shared");
    ensureConversation(shared);
    writeFileSync(shared.lock, JSON.stringify({ pid: process.ppid, host: `${hostname()}-other`, token: "t", folder: "1:2" }), { mode: 0o600 });
    await expect(withConversationLock(shared, async () => undefined, { stale: 2_000, wait: 500 })).rejects.toThrow(/busy/);
  }, 20_000);

  /** Whether this machine lets a process mount an overlay in a mount namespace of its own (root, unshare). */
  const overlays = (() => {
    const root = mkdtempSync(join(tmpdir(), "lnk-store-overlay-"));
    for (const d of ["lower", "upper", "work", "seen"]) mkdirSync(join(root, d));
    const ok = spawnSync("unshare", ["-m", "sh", "-c", `mount -t overlay overlay -o lowerdir=${root}/lower,upperdir=${root}/upper,workdir=${root}/work ${root}/seen`]).status === 0;
    rmSync(root, { recursive: true, force: true });
    return ok;
  })();

  it.skipIf(!overlays)("a live lock of this machine's, its folder seen through another mount (another device number), is not taken", async () => {
    const root = tempDir();
    const dir = join(root, "agent");
    mkdirSync(dir);
    const conv = paths({ dir }).conversation("seen-twice");
    ensureConversation(conv);
    mkdirSync(join(root, "lower"));
    mkdirSync(join(root, "work"));
    const mount = `mount -t overlay overlay -o lowerdir=${root}/lower,upperdir=${dir},workdir=${root}/work ${dir}`;
    const holder = new Child("unshare", ["-m", "sh", "-c", `${mount} && exec "$0" "$@"`, process.execPath, WORKER, "hold", dir, conv.thread]);
    await holder.line((l) => l === "held");
    // A backup made with hard links meanwhile: the lock has names outside its folder too.
    expect(spawnSync("cp", ["-al", conv.dir, join(root, "backup")]).status).toBe(0);
    expect(lstatSync(conv.lock).nlink).toBeGreaterThan(2);
    let entered = false;
    await expect(
      withConversationLock(conv, async () => {
        entered = true;
      }, { stale: 2_000, wait: 1_500 }),
    ).rejects.toThrow(/busy/);
    expect(entered, "a second turn ran while the live holder held the lock").toBe(false);
    holder.proc.kill("SIGKILL");
    await holder.exit();
  }, 20_000);

  it("a prompt owed by a process killed mid-turn is still owed once its agent's folder is restored from a copy (cp -a, a move across disks)", async () => {
    const root = tempDir();
    const dir = join(root, "agent");
    mkdirSync(dir);
    const conv = paths({ dir }).conversation("restored");
    const owing = worker("owe", dir, conv.thread);
    const name = (await owing.line((l) => l.startsWith("owed "))).slice("owed ".length);
    owing.proc.kill("SIGKILL");
    await owing.exit();
    expect(listOwed({ dir }).owed.map((o) => o.name)).toEqual([name]);
    // A copy with hard links (cp -al), the original there too: owed in each, its process gone.
    const linked = join(root, "linked");
    expect(spawnSync("cp", ["-al", dir, linked]).status).toBe(0);
    expect(lstatSync(paths({ dir: linked }).conversation(conv.thread).dir).ino).not.toBe(lstatSync(conv.dir).ino);
    expect(listOwed({ dir: linked }).owed.map((o) => o.name)).toEqual([name]);
    expect(spawnSync("cp", ["-a", dir, `${dir}.restored`]).status).toBe(0);
    rmSync(dir, { recursive: true });
    renameSync(`${dir}.restored`, dir);
    expect(listOwed({ dir }).owed.map((o) => o.name)).toEqual([name]);
  }, 20_000);

  it("a lock left by a process killed while holding it is taken over, within the stale period", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("killed");
    const holder = worker("hold", dir, conv.thread);
    await holder.line((l) => l === "held");
    const blocked = worker("take", dir, conv.thread, "300");
    expect(await blocked.line((l) => l.startsWith("acquired ") || l === "busy")).toBe("busy");
    await blocked.exit();

    holder.proc.kill("SIGKILL");
    expect((await holder.exit()).signal).toBe("SIGKILL");
    const killedAt = Date.now();
    expect(existsSync(conv.lock), "the killed holder's lock is left behind").toBe(true);

    const taker = worker("take", dir, conv.thread, "10000");
    const line = await taker.line((l) => l.startsWith("acquired ") || l === "busy", 15_000);
    expect(line).toMatch(/^acquired \d+$/);
    // At once when its holder is known to be gone; at the latest once the lock is stale.
    expect(Number(line.split(" ")[1]) - killedAt).toBeLessThan(2_000 + 3_000);
    expect((await taker.exit()).code).toBe(0);
    expect(existsSync(conv.lock), "released").toBe(false);
    // The killed process's holder, which its lock was a second name of, goes with its lock; the taker's went as it exited.
    expect(readdirSync(conv.dir).filter((n) => n.startsWith(".holder-"))).toEqual([]);
  }, 20_000);

  it("a lock is a second name of the process's holder: no file made or freed at a turn, the same one turn after turn", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("linked");
    ensureConversation(conv);
    const seen: { ino: number; nlink: number; holders: string[] }[] = [];
    for (let i = 0; i < 3; i++) {
      await withConversationLock(conv, async () => {
        const st = lstatSync(conv.lock);
        seen.push({ ino: st.ino, nlink: st.nlink, holders: readdirSync(conv.dir).filter((n) => n.startsWith(".holder-")) });
      });
    }
    const holder = `.holder-${process.pid}-`;
    expect(seen.map((s) => s.nlink)).toEqual([2, 2, 2]);
    expect(new Set(seen.map((s) => s.ino)).size, "one file, every turn").toBe(1);
    expect(seen.every((s) => s.holders.length === 1 && s.holders[0]?.startsWith(holder))).toBe(true);
    // Between turns only the holder is there, its one name, holding who it is.
    expect(existsSync(conv.lock)).toBe(false);
    const [name] = seen[0]?.holders ?? [];
    const st = lstatSync(join(conv.dir, String(name)));
    expect([st.ino, st.nlink, st.mode & 0o777]).toEqual([seen[0]?.ino, 1, 0o600]);
    expect(JSON.parse(readFileSync(join(conv.dir, String(name)), "utf8"))).toMatchObject({ pid: process.pid, host: hostname() });
  });

  it("a lock that is this process's holder and held by none of its turns (a release that could not remove it, a name another gave it) is taken at once", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("leftover");
    ensureConversation(conv);
    await withConversationLock(conv, async () => undefined);
    const [name] = readdirSync(conv.dir).filter((n) => n.startsWith(".holder-"));
    linkSync(join(conv.dir, String(name)), conv.lock);
    const began = Date.now();
    await withConversationLock(conv, async () => {
      expect(lstatSync(conv.lock).nlink).toBe(2);
    }, { wait: 1_000 });
    expect(Date.now() - began).toBeLessThan(1_000);
    expect(existsSync(conv.lock)).toBe(false);
  });

  it("a holder given a second name is kept; one that is not its file (a FIFO, a link) is made again; the lock still holds", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("spoilt");
    ensureConversation(conv);
    await withConversationLock(conv, async () => undefined);
    const [name] = readdirSync(conv.dir).filter((n) => n.startsWith(".holder-"));
    const path = join(conv.dir, String(name));
    const outside = join(dir, "outside.txt");
    const spoil = [
      () => linkSync(path, join(dir, "second-name")),
      () => {
        rmSync(path);
        spawnSync("mkfifo", [path]);
      },
      () => {
        rmSync(path);
        writeFileSync(outside, "not a holder");
        symlinkSync(outside, path);
      },
    ];
    for (const make of spoil) {
      make();
      await withConversationLock(conv, async () => {
        expect(lstatSync(conv.lock).isFile()).toBe(true);
        expect(JSON.parse(readFileSync(conv.lock, "utf8"))).toMatchObject({ pid: process.pid });
      }, { wait: 1_000 });
      expect(lstatSync(path).isFile()).toBe(true);
    }
    // Nothing outside was written to.
    expect(readFileSync(outside, "utf8")).toBe("not a holder");
  });

  it("holders a process of this machine that is gone left (killed between turns) are removed when another makes its own; another machine's are left", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("swept");
    ensureConversation(conv);
    const deadPid = gonePid();
    const dead = join(conv.dir, `.holder-${deadPid}-0123456789ab-01234567`);
    writeFileSync(dead, JSON.stringify({ pid: deadPid, host: hostname(), token: "t" }), { mode: 0o600 });
    // What it was writing when it was killed (its pid and tag), with no lock left to take over; and a live process's, which stays.
    const deadTemp = join(conv.dir, `.tmp-${deadPid}-0123456789ab-abc-1`);
    writeFileSync(deadTemp, "{", { mode: 0o600 });
    // Another machine's process of the same pid: its file, however old, is its holder's to keep (an
    // answer's file waits for the model as long as it takes).
    const elsewhereTemp = join(conv.dir, `.tmp-${deadPid}-ba9876543210-abc-1`);
    writeFileSync(elsewhereTemp, "", { mode: 0o600 });
    utimesSync(elsewhereTemp, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
    const liveTemp = join(conv.dir, `.tmp-${process.pid}-abc-1`);
    writeFileSync(liveTemp, "{", { mode: 0o600 });
    const elsewhere = join(conv.dir, `.holder-${deadPid}-ba9876543210-01234567`);
    writeFileSync(elsewhere, JSON.stringify({ pid: deadPid, host: `${hostname()}-other`, token: "t" }), { mode: 0o600 });
    // One it was killed while making (empty, however new): removed at once. One with a text that is
    // no owner's: removed once older than the stale period, not before.
    const half = join(conv.dir, `.holder-${deadPid}-aaaaaaaaaaaa-01234567`);
    writeFileSync(half, "", { mode: 0o600 });
    const garbled = join(conv.dir, `.holder-${deadPid}-bbbbbbbbbbbb-01234567`);
    writeFileSync(garbled, "{", { mode: 0o600 });
    const garbledOld = join(conv.dir, `.holder-${deadPid}-cccccccccccc-01234567`);
    writeFileSync(garbledOld, "{", { mode: 0o600 });
    const old = new Date(Date.now() - 60_000);
    utimesSync(garbledOld, old, old);
    await withConversationLock(conv, async () => undefined);
    await sweepsSettled();
    expect([existsSync(dead), existsSync(half), existsSync(garbledOld), existsSync(deadTemp)]).toEqual([false, false, false, false]);
    expect([existsSync(elsewhere), existsSync(garbled), existsSync(liveTemp), existsSync(elsewhereTemp)]).toEqual([true, true, true, true]);
  });

  it("an earlier version's temporary file of this process's pid (a daemon restarted as pid 1), older than the process, is removed though this process's holder is there", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("own-pid-untagged");
    ensureConversation(conv);
    const then = Date.now() - 3_600_000;
    // Named as earlier versions named them: no tag.
    const temp = join(conv.dir, `.tmp-${process.pid}-${then.toString(36)}-1`);
    writeFileSync(temp, "", { mode: 0o600 });
    utimesSync(temp, new Date(then), new Date(then));
    await withConversationLock(conv, async () => undefined, { stale: 2_000 });
    await sweepsSettled();
    expect(readdirSync(conv.dir).filter((n) => n.startsWith(".holder-"))).toHaveLength(1);
    expect(existsSync(temp)).toBe(false);
  });

  it("a holder a process was killed while making (the file made, no text in it yet) is removed at once by the next that makes its own", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("killed-making");
    ensureConversation(conv);
    // Killed the moment its holder's file is made, before a byte of it is written.
    const preload = join(dir, "killed-making.mjs");
    writeFileSync(
      preload,
      `import fs from "node:fs"; import { syncBuiltinESMExports } from "node:module";
const open = fs.openSync;
fs.openSync = (path, flags, mode) => { const fd = open(path, flags, mode); if (String(path).includes("/.holder-") && typeof flags === "number" && (flags & fs.constants.O_CREAT)) process.kill(process.pid, "SIGKILL"); return fd; };
syncBuiltinESMExports();\n`,
    );
    const child = new Child(process.execPath, [
      "--import",
      preload,
      "--input-type=module",
      "-e",
      `import { paths, withConversationLock } from ${JSON.stringify(join(ROOT, "dist/store/index.js"))};
      await withConversationLock(paths({ dir: ${JSON.stringify(dir)} }).conversation(${JSON.stringify(conv.thread)}), async () => undefined);`,
    ]);
    expect((await child.exit()).signal).toBe("SIGKILL");
    const pid = child.proc.pid as number;
    const left = () => readdirSync(conv.dir).filter((n) => n.startsWith(`.holder-${pid}-`));
    expect(left().map((n) => statSync(join(conv.dir, n)).size), "left empty by the kill").toEqual([0]);
    await withConversationLock(conv, async () => undefined);
    await sweepsSettled();
    expect(left()).toEqual([]);
  }, 20_000);

  it("temporary files a gone process left where it held no lock (a killed `usage`) are removed once older than the stale period; a live process's, a new one and no file are left", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("temps");
    ensureConversation(conv);
    const deadPid = gonePid();
    const old = new Date(Date.now() - 60_000);
    const plant = (name: string, aged: boolean) => {
      const path = join(conv.dir, name);
      writeFileSync(path, "{", { mode: 0o600 });
      if (aged) utimesSync(path, old, old);
      return path;
    };
    const deadOld = plant(`.tmp-${deadPid}-abc-1`, true);
    const deadNew = plant(`.tmp-${deadPid}-abc-2`, false);
    // The parent of this process is alive: its temporary file stays, however old.
    const liveOld = plant(`.tmp-${process.ppid}-abc-1`, true);
    const folderThere = join(conv.dir, `.tmp-${deadPid}-abc-3`);
    mkdirSync(folderThere);
    utimesSync(folderThere, old, old);
    const fifo = join(conv.dir, `.tmp-${deadPid}-abc-4`);
    expect(spawnSync("mkfifo", [fifo]).status).toBe(0);
    utimesSync(fifo, old, old);
    const outside = plant("outside", false);
    const link = join(conv.dir, `.tmp-${deadPid}-abc-5`);
    symlinkSync(outside, link);
    // Pids past any a process has, and past what a signal can name: gone, so an old file of theirs goes.
    const huge = plant(".tmp-9999999999-abc-6", true);
    // A dead lock an earlier version moved aside, left where it was killed just then: a file, and a
    // folder with its owner file (older versions' lock); a live process's is left.
    const asideFile = plant(`.lock.dead-${deadPid}-1`, true);
    const asideFolder = join(conv.dir, `.lock.dead-${deadPid}-2`);
    mkdirSync(asideFolder);
    writeFileSync(join(asideFolder, "owner"), "{}");
    utimesSync(asideFolder, old, old);
    const asideLive = plant(`.lock.dead-${process.ppid}-3`, true);
    await withConversationLock(conv, async () => undefined);
    await sweepsSettled();
    expect([deadOld, deadNew, liveOld, folderThere, fifo, huge].map((p) => existsSync(p))).toEqual([false, true, true, true, true, false]);
    expect([asideFile, asideFolder, asideLive].map((p) => existsSync(p))).toEqual([false, false, true]);
    expect([lstatSync(link).isSymbolicLink(), readFileSync(outside, "utf8")]).toEqual([true, "{"]);
  });

  it("a gone process's lock of a version before tokens is taken over with its untagged temporary files, not another process's holder or files of its pid", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("tokenless");
    ensureConversation(conv);
    const deadPid = gonePid();
    writeFileSync(conv.lock, JSON.stringify({ pid: deadPid, host: hostname() }), { mode: 0o600 });
    const untagged = join(conv.dir, `.tmp-${deadPid}-mx00abcd-1`);
    writeFileSync(untagged, "{", { mode: 0o600 });
    // Another machine's live process that has the same pid: its holder and its answer's file.
    const theirs = join(conv.dir, `.holder-${deadPid}-0123456789ab-01234567`);
    writeFileSync(theirs, JSON.stringify({ pid: deadPid, host: `${hostname()}-other`, token: "0123456789ab-rest" }), { mode: 0o600 });
    const theirTemp = join(conv.dir, `.tmp-${deadPid}-0123456789ab-mx00abcd-1`);
    writeFileSync(theirTemp, "", { mode: 0o600 });
    await withConversationLock(conv, async () => undefined, { wait: 1_000 });
    await sweepsSettled();
    expect([existsSync(untagged), existsSync(theirs), existsSync(theirTemp)]).toEqual([false, true, true]);
  });

  it("a holder a process killed between turns left is removed by a process that has its own there already, a stale period on", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("killed-between");
    ensureConversation(conv);
    await withConversationLock(conv, async () => undefined, { stale: 2_000 });
    const script = `import(${JSON.stringify(join(ROOT, "dist/store/index.js"))}).then(async (s) => {
      await s.withConversationLock(s.paths({ dir: ${JSON.stringify(dir)} }).conversation("killed-between"), async () => undefined);
      process.stdout.write("between\\n");
      setInterval(() => undefined, 60_000);
    });`;
    const other = new Child(process.execPath, ["-e", script]);
    await other.line((l) => l === "between");
    const pid = other.proc.pid as number;
    other.proc.kill("SIGKILL");
    await other.exit();
    const left = () => readdirSync(conv.dir).filter((n) => n.startsWith(`.holder-${pid}-`));
    expect(left(), "left by the kill").toHaveLength(1);
    await new Promise((r) => setTimeout(r, 2_100));
    await withConversationLock(conv, async () => undefined, { stale: 2_000 });
    for (let i = 0; i < 50 && left().length > 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(left()).toEqual([]);
  }, 20_000);

  it("a lock of this process's pid and another token (a daemon restarted as pid 1, or a live one of another pid namespace) waits to go stale; such a holder is removed once older than the stale period, this process's own left", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("same-pid");
    ensureConversation(conv);
    const text = JSON.stringify({ pid: process.pid, host: hostname(), token: "0123456789ab-cdef-0123-4567-89abcdef0123" });
    // Its holder, linked as the lock it holds (or held when it was killed), fresh.
    const other = join(conv.dir, `.holder-${process.pid}-0123456789ab-01234567`);
    writeFileSync(other, text, { mode: 0o600 });
    linkSync(other, conv.lock);
    await expect(withConversationLock(conv, async () => undefined, { wait: 500, stale: 2_000 })).rejects.toThrow(/busy/);
    expect(existsSync(conv.lock)).toBe(true);
    // Gone stale: taken over.
    const old = new Date(Date.now() - 60_000);
    utimesSync(other, old, old);
    await withConversationLock(conv, async () => undefined, { wait: 1_000, stale: 2_000 });
    // Its holder, older than the stale period: removed when this process looks again, a stale period on.
    await new Promise((r) => setTimeout(r, 2_100));
    await withConversationLock(conv, async () => undefined, { stale: 2_000 });
    for (let i = 0; i < 50 && existsSync(other); i++) await new Promise((r) => setTimeout(r, 20));
    expect(existsSync(other), "its holder, older than the stale period").toBe(false);
    const mine = readdirSync(conv.dir).filter((n) => n.startsWith(`.holder-${process.pid}-`));
    expect(mine).toHaveLength(1);
    // A fresh one (its process may live, in another namespace) is left until it is older than that.
    writeFileSync(other, text, { mode: 0o600 });
    await new Promise((r) => setTimeout(r, 2_100));
    utimesSync(other, new Date(), new Date());
    await withConversationLock(conv, async () => undefined, { stale: 2_000 });
    await new Promise((r) => setTimeout(r, 200));
    expect(existsSync(other)).toBe(true);
  }, 20_000);

  it.skipIf(spawnSync("unshare", ["--pid", "--fork", "--mount-proc", "true"]).status !== 0)("two live processes of one pid and host name (each pid 1 of a pid namespace of its own): one never takes the other's lock, nor breaks it", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("shared");
    ensureConversation(conv);
    const store = JSON.stringify(join(ROOT, "dist/store/index.js"));
    const inNamespace = (script: string) => new Child("unshare", ["--pid", "--fork", "--mount-proc", process.execPath, "-e", script]);
    const holding = inNamespace(`import(${store}).then(async (s) => {
      const conv = s.paths({ dir: ${JSON.stringify(dir)} }).conversation("shared");
      const r = await s.withConversationLock(conv, async () => {
        process.stdout.write("holding pid=" + process.pid + "\\n");
        await new Promise((r) => setTimeout(r, 3000));
        return "kept";
      }).catch((e) => "lost: " + e.message);
      process.stdout.write("first " + r + "\\n");
    });`);
    expect(await holding.line((l) => l.startsWith("holding"))).toBe("holding pid=1");
    const second = inNamespace(`import(${store}).then(async (s) => {
      const conv = s.paths({ dir: ${JSON.stringify(dir)} }).conversation("shared");
      const r = await s.withConversationLock(conv, async () => "entered", { wait: 1000 }).catch((e) => "busy: " + e.message);
      process.stdout.write("second " + r + "\\n");
    });`);
    expect((await second.line((l) => l.startsWith("second "))).replace(/:.*/, "")).toBe("second busy");
    expect(await holding.line((l) => l.startsWith("first "))).toBe("first kept");
  }, 30_000);

  it("a prompt marked after its turn's lock went to another process makes no owed name", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("lost-owed");
    ensureConversation(conv);
    const other = join(dir, "other-lock");
    let wrote: unknown;
    await withConversationLock(conv, async () => {
      rmSync(conv.lock);
      writeFileSync(other, JSON.stringify({ pid: 1, host: `${hostname()}-other`, token: "x" }), { mode: 0o600 });
      linkSync(other, conv.lock);
      try {
        wrote = writeOwed(conv, `owed-${process.pid}-00000000000000ab`, 4);
      } catch (e) {
        wrote = e;
      }
    }).catch(() => undefined);
    expect(wrote).toBeInstanceOf(LockLostError);
    expect(readdirSync(conv.dir).filter((n) => n.startsWith("owed-"))).toEqual([]);
  });

  it("of two turns of one process naming one folder by two paths, the one whose lock went writes nothing once the other holds it, and letting go leaves the other's lock", async () => {
    const [first, second] = onePlaceTwoPaths("t");
    let wrote1: unknown;
    let wrote2: unknown;
    let lockThere: boolean | undefined;
    let entered!: () => void;
    const in2 = new Promise<void>((r) => (entered = r));
    let leave!: () => void;
    const left = new Promise<void>((r) => (leave = r));
    let turn2: Promise<void> | undefined;
    await withConversationLock(first, async () => {
      // Its lock removed, as a takeover by another process that let it go since would.
      rmSync(first.lock);
      turn2 = withConversationLock(
        second,
        async () => {
          entered();
          await left;
          lockThere = existsSync(second.lock);
          wrote2 = await appendEvent(second, userMessage("turn 2")).then(() => "wrote", (e: unknown) => e);
        },
        { wait: 2_000 },
      );
      await in2;
      wrote1 = await appendEvent(first, userMessage("turn 1, its lock gone")).then(() => "wrote", (e: unknown) => e);
    }).catch(() => undefined);
    leave();
    await turn2;
    expect(wrote1).toBeInstanceOf(LockLostError);
    expect(lockThere, "the first turn's letting go left the second's lock").toBe(true);
    expect(wrote2).toBe("wrote");
  }, 20_000);

  it("a conversation's lock held by one turn is not touched by another turn of the process that names its folder by another path: it waits, and the first is never taken for lost", async () => {
    const [first, second] = onePlaceTwoPaths("two-paths");
    const lost: string[] = [];
    let busy: unknown;
    await withConversationLock(
      first,
      async () => {
        busy = await withConversationLock(second, async () => "entered", { wait: 300, stale: 2_000 }).catch((e: unknown) => e);
        // Past the first lock's refresh (every half stale period), which finds its time as it left it.
        await new Promise((r) => setTimeout(r, 1_500));
      },
      { stale: 2_000, onCompromised: (e) => lost.push(e.message) },
    );
    expect(busy).toBeInstanceOf(Error);
    expect((busy as Error).message).toMatch(/busy/);
    expect(lost).toEqual([]);
  });

  it("a prompt owed under a held lock is one more name of the holder, its mark in its name; marked again, renamed; an earlier version's file still read", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("owing");
    ensureConversation(conv);
    const id = "00000000000000ab";
    const name = `owed-${process.pid}-${id}`;
    let owed = "";
    await withConversationLock(conv, async () => {
      owed = writeOwed(conv, name, 4);
      expect(owed).toBe(`${name}-4`);
      const holder = readdirSync(conv.dir).find((n) => n.startsWith(".holder-"));
      expect([lstatSync(join(conv.dir, owed)).ino, lstatSync(join(conv.dir, owed)).nlink]).toEqual([lstatSync(join(conv.dir, String(holder))).ino, 3]);
      // A message that steered the turn: the same prompt, owed after it now.
      owed = writeOwed(conv, name, 6, owed);
    });
    expect(readdirSync(conv.dir).filter((n) => n.startsWith("owed-"))).toEqual([`${name}-6`]);
    // An earlier version's file, its mark inside.
    const earlier = `owed-${process.pid}-00000000000000cd`;
    writeFileSync(join(conv.dir, earlier), JSON.stringify({ v: 1, after: 2, time: new Date().toISOString() }), { mode: 0o600 });
    const listed = listOwed({ dir }).owed.map((o) => [o.name, o.after, o.pid]).sort();
    expect(listed).toEqual([[earlier, 2, process.pid], [`${name}-6`, 6, process.pid]].sort());
    // A holder that outlived its lock: the next turn takes the lock with the owed name still there.
    await withConversationLock(conv, async () => undefined, { wait: 1_000 });
    removeOwed(conv, owed);
    expect(readdirSync(conv.dir).filter((n) => n.startsWith("owed-"))).toEqual([earlier]);
  });

  it("a mark's message tag, any time a message may have, is kept in its name: listed, claimed and marked again with it", () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("tagged");
    ensureConversation(conv);
    let k = 0;
    fc.assert(
      fc.property(fc.date({ min: new Date(0), max: new Date("9999-12-31T23:59:59.999Z"), noInvalidDate: true }), fc.nat(999_999_999_999_999), (time, after) => {
        const tag = messageTag(time.toISOString());
        expect(tag).toBeDefined();
        const id = (k++).toString(16).padStart(16, "0");
        // A gone process's (no process has a pid that high).
        const name = `owed-4194305-${id}`;
        const owed = writeOwed(conv, name, after, undefined, false, tag);
        expect(owed).toBe(`${name}-${after}-${tag}`);
        const listed = listOwed({ dir }).owed.find((o) => o.name === owed);
        expect(listed).toMatchObject({ pid: 4194305, after, tag });
        // Taken by this process's recovery: the same mark and tag, under its own pid.
        const claimed = claimOwed(listed as Owed);
        expect(claimed?.name).toBe(`owed-${process.pid}-${id}-${after}-${tag}`);
        expect(listOwed({ dir }).owed.find((o) => o.name === claimed?.name)).toMatchObject({ pid: process.pid, after, tag });
        removeOwed(conv, String(claimed?.name));
        // The tag tells this time's message from one a millisecond apart.
        expect(messageTag(new Date(time.getTime() + 1).toISOString())).not.toBe(tag);
      }),
      { numRuns: 200 },
    );
    // Not a time: no tag, and the mark is as an earlier version made it.
    expect(messageTag("yesterday")).toBeUndefined();
  });

  it("a mark asked to be a name only is one (a link to the holder, or the mark before renamed), or nothing at all where it would be a file", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("names-only");
    ensureConversation(conv);
    const name = `owed-${process.pid}-00000000000000ef`;
    const owedNames = () => readdirSync(conv.dir).filter((n) => n.startsWith("owed-"));
    // No lock held, so no holder to link: nothing written, and the full write makes a file.
    expect(writeOwed(conv, name, 1, undefined, true)).toBeUndefined();
    expect(owedNames()).toEqual([]);
    const filed = writeOwed(conv, name, 1);
    expect(lstatSync(join(conv.dir, filed)).nlink).toBe(1);
    // The mark before, renamed: a name only, even without a holder.
    expect(writeOwed(conv, name, 2, filed, true)).toBe(`${name}-2`);
    expect(owedNames()).toEqual([`${name}-2`]);
    removeOwed(conv, `${name}-2`);
    // Under a held lock: one more name of the holder.
    await withConversationLock(conv, async () => {
      const linked = writeOwed(conv, name, 3, undefined, true);
      expect(linked).toBe(`${name}-3`);
      const holder = readdirSync(conv.dir).find((n) => n.startsWith(".holder-"));
      expect(lstatSync(join(conv.dir, String(linked))).ino).toBe(lstatSync(join(conv.dir, String(holder))).ino);
      removeOwed(conv, String(linked));
    });
    expect(owedNames()).toEqual([]);
  });

  it("owed names that are no file (a FIFO, a folder, a link to a file outside) are named as faults and never opened; the rest are listed", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("planted");
    ensureConversation(conv);
    const secret = join(dir, "secret.txt");
    writeFileSync(secret, "never read", { mode: 0o600 });
    spawnSync("mkfifo", [join(conv.dir, "owed-1-00000000000000a1-3")]);
    mkdirSync(join(conv.dir, "owed-1-00000000000000a2-3"));
    symlinkSync(secret, join(conv.dir, "owed-1-00000000000000a3-3"));
    writeFileSync(join(conv.dir, "owed-1-00000000000000a4-999999999999999"), "", { mode: 0o600 });
    // Not owed names at all: left alone.
    writeFileSync(join(conv.dir, "owed-1-00000000000000a5-1e3"), "", { mode: 0o600 });
    writeFileSync(join(conv.dir, "owed-1-00000000000000a6-9999999999999999"), "", { mode: 0o600 });
    const { owed, faults } = listOwed({ dir });
    expect(owed.map((o) => [o.name, o.after])).toEqual([["owed-1-00000000000000a4-999999999999999", 999_999_999_999_999]]);
    expect(faults.map((f) => f.replace(/^.*\/(owed-[^ :]+).*$/, "$1")).sort()).toEqual(["owed-1-00000000000000a1-3", "owed-1-00000000000000a2-3", "owed-1-00000000000000a3-3"]);
    expect(readFileSync(secret, "utf8")).toBe("never read");
  });

  it("a lock folder an earlier version left, its holder gone, is taken over at once", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("earlier");
    ensureConversation(conv);
    const gone = gonePid();
    mkdirSync(conv.lock);
    writeFileSync(join(conv.lock, "owner"), JSON.stringify({ pid: gone, host: hostname() }));
    // What it was writing when it died, and a temporary file of a live process, which stays.
    writeFileSync(join(conv.dir, `.tmp-${gone}-abc-1`), "{\"v\":1");
    writeFileSync(join(conv.dir, `.tmp-${process.pid}-abc-1`), "{}");
    const made = Date.now();
    utimesSync(conv.lock, new Date(made), new Date(made));
    const taker = worker("take", dir, conv.thread, "10000");
    const line = await taker.line((l) => l.startsWith("acquired ") || l === "busy", 15_000);
    expect(line).toMatch(/^acquired \d+$/);
    // Well before the lock would be stale (10 s).
    expect(Number(line.split(" ")[1]) - made).toBeLessThan(5_000);
    expect((await taker.exit()).code).toBe(0);
    expect(existsSync(conv.lock), "released").toBe(false);
    expect(readdirSync(conv.dir).filter((n) => n.startsWith(".tmp-"))).toEqual([`.tmp-${process.pid}-abc-1`]);
  }, 20_000);

  it("a lock whose holder can't be known (another machine's) is taken over only once it is stale", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("elsewhere");
    ensureConversation(conv);
    // As another machine's process would leave it: the lock's folder, refreshed last now.
    mkdirSync(conv.lock);
    const refreshed = new Date();
    utimesSync(conv.lock, refreshed, refreshed);
    const taker = worker("take", dir, conv.thread, "10000");
    const line = await taker.line((l) => l.startsWith("acquired ") || l === "busy", 15_000);
    expect(line).toMatch(/^acquired \d+$/);
    const after = Number(line.split(" ")[1]) - refreshed.getTime();
    expect(after).toBeGreaterThanOrEqual(2_000);
    expect(after).toBeLessThan(2_000 + 2_000);
    expect((await taker.exit()).code).toBe(0);
  }, 20_000);
});

describe("files made ahead for a conversation's next events (spares)", () => {
  afterEach(() => dropSpares());

  /** The temp files of process `pid` in the conversation's folder, with their inodes. */
  const temps = (conv: { dir: string }, pid = process.pid) =>
    readdirSync(conv.dir)
      .filter((n) => n.startsWith(`.tmp-${pid}-`))
      .map((n) => ({ name: n, ino: lstatSync(join(conv.dir, n)).ino }));

  /** A turn's writes, as the turn makes them: the answer's file prepared, the question begun, both linked. */
  async function turnWrites(conv: ReturnType<ReturnType<typeof paths>["conversation"]>, question: string, answer: string): Promise<void> {
    await withConversationLock(conv, async () => {
      const prepared = await prepareEvent(conv);
      const asked = beginEvent(conv, userMessage(question), undefined, { later: true });
      const answered = beginEvent(conv, { v: EVENT_VERSION, time: new Date().toISOString(), kind: "message", role: "assistant", text: answer, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" }, prepared, { waited: true });
      await asked.link();
      await answered.link();
    });
  }

  it("a turn writes its question and its answer into them: its events are those files, and none is left but those kept", async () => {
    const conv = paths({ dir: tempDir() }).conversation("spared");
    ensureConversation(conv);
    await makeSpares(conv);
    const made = temps(conv);
    expect(made).toHaveLength(2);
    for (const t of made) expect([t.name, lstatSync(join(conv.dir, t.name)).mode & 0o777, lstatSync(join(conv.dir, t.name)).size]).toEqual([t.name, 0o600, 0]);
    // Made again while they are kept: nothing more.
    await makeSpares(conv);
    expect(temps(conv)).toEqual(made);
    await turnWrites(conv, "asked", "answered");
    expect(readEventsFrom(conv, 1).map((e) => (e.event as { text: string }).text)).toEqual(["asked", "answered"]);
    expect([eventName(1), eventName(2)].map((n) => lstatSync(join(conv.dir, n)).ino).sort()).toEqual(made.map((t) => t.ino).sort());
    expect([sparesKept(), temps(conv)]).toEqual([0, []]);
    // None kept: the next turn makes its files as before.
    await turnWrites(conv, "again", "answered again");
    expect(readEventsFrom(conv, 3).map((e) => (e.event as { text: string }).text)).toEqual(["again", "answered again"]);
    expect(temps(conv)).toEqual([]);
  });

  it("a turn that comes while they are being made writes into those under way, making no file of its own", async () => {
    const conv = paths({ dir: tempDir() }).conversation("coming");
    ensureConversation(conv);
    // Not waited for: the turn's question and answer come while the two are made.
    const making = makeSpares(conv);
    await turnWrites(conv, "asked", "answered");
    await making;
    expect(readEventsFrom(conv, 1).map((e) => (e.event as { text: string }).text)).toEqual(["asked", "answered"]);
    // Both taken by the turn: none left over, as there would be two had it made its own.
    expect([sparesKept(), temps(conv)]).toEqual([0, []]);
    // The next ones are made as before, and the next turn takes them at once.
    await makeSpares(conv);
    const made = temps(conv);
    expect(made).toHaveLength(2);
    await turnWrites(conv, "again", "answered again");
    expect([eventName(3), eventName(4)].map((n) => lstatSync(join(conv.dir, n)).ino).sort()).toEqual(made.map((t) => t.ino).sort());
  });

  it("one that is not as it was made is never written into: another file at its name, a second name, a FIFO, written to", async () => {
    const conv = paths({ dir: tempDir() }).conversation("spoiled");
    ensureConversation(conv);
    await makeSpares(conv);
    const [replaced, linked] = temps(conv).map((t) => join(conv.dir, t.name));
    // Another file renamed over the first's name; a second name given to the second.
    writeFileSync(join(conv.dir, "theirs"), "theirs", { mode: 0o600 });
    renameSync(join(conv.dir, "theirs"), String(replaced));
    const second = join(conv.dir, "second-name");
    linkSync(String(linked), second);
    await turnWrites(conv, "asked", "answered");
    expect(readEventsFrom(conv, 1).map((e) => (e.event as { text: string }).text)).toEqual(["asked", "answered"]);
    // Another's file is left as it is; the spare with a second name has its own name removed, and nothing written to it.
    expect(readFileSync(String(replaced), "utf8")).toBe("theirs");
    expect(existsSync(String(linked))).toBe(false);
    expect([readFileSync(second, "utf8"), lstatSync(second).nlink]).toEqual(["", 1]);
    rmSync(String(replaced));

    await makeSpares(conv);
    const [fifo, written] = temps(conv).map((t) => join(conv.dir, t.name));
    rmSync(String(fifo));
    expect(spawnSync("mkfifo", ["-m", "600", String(fifo)]).status).toBe(0);
    appendFileSync(String(written), "planted");
    await turnWrites(conv, "asked again", "answered again");
    expect(readEventsFrom(conv, 3).map((e) => (e.event as { text: string }).text)).toEqual(["asked again", "answered again"]);
    expect(lstatSync(String(fifo)).isFIFO()).toBe(true);
    expect(existsSync(String(written))).toBe(false);
    expect([sparesKept(), temps(conv).map((t) => join(conv.dir, t.name))]).toEqual([0, [fifo]]);
  });

  it(`are kept for the ${SPARE_CONVERSATIONS} conversations used most lately: the others' are removed`, async () => {
    const dir = tempDir();
    const convs = Array.from({ length: SPARE_CONVERSATIONS + 2 }, (_, i) => paths({ dir }).conversation(`c${i}`));
    for (const conv of convs) {
      ensureConversation(conv);
      await makeSpares(conv);
    }
    // The first used again: kept, and the second and third let go.
    await makeSpares(convs[0]!);
    expect(convs.map((c) => temps(c).length)).toEqual([2, 0, 0, ...Array.from({ length: SPARE_CONVERSATIONS - 1 }, () => 2)]);
    expect(sparesKept()).toBe(2 * SPARE_CONVERSATIONS);
  });

  it("letting them go (the least lately used, or all) removes a spare's name only while it is the file made", async () => {
    const dir = tempDir();
    const first = paths({ dir }).conversation("first");
    ensureConversation(first);
    await makeSpares(first);
    const [replaced, kept] = temps(first).map((t) => join(first.dir, t.name));
    writeFileSync(join(first.dir, "theirs"), "theirs", { mode: 0o600 });
    renameSync(join(first.dir, "theirs"), String(replaced));
    for (let i = 0; i < SPARE_CONVERSATIONS; i++) {
      const other = paths({ dir }).conversation(`other${i}`);
      ensureConversation(other);
      await makeSpares(other);
    }
    // The first let go: another's file at its spare's name is left; its other spare is removed.
    expect([readFileSync(String(replaced), "utf8"), existsSync(String(kept))]).toEqual(["theirs", false]);
    const last = paths({ dir }).conversation(`other${SPARE_CONVERSATIONS - 1}`);
    const [theirs] = temps(last).map((t) => join(last.dir, t.name));
    rmSync(String(theirs));
    writeFileSync(String(theirs), "theirs too", { mode: 0o600 });
    dropSpares();
    expect([readFileSync(String(theirs), "utf8"), temps(last).length]).toEqual(["theirs too", 1]);
  });

  it("none are made where the file system takes no hard link (the process leaves no holder to find them by)", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("no-links");
    const preload = join(dir, "no-links.mjs");
    writeFileSync(
      preload,
      `import fs from "node:fs"; import { syncBuiltinESMExports } from "node:module";
fs.linkSync = () => { throw Object.assign(new Error("EPERM: operation not permitted, link"), { code: "EPERM" }); };
syncBuiltinESMExports();\n`,
    );
    const child = new Child(process.execPath, [
      "--import",
      preload,
      "--input-type=module",
      "-e",
      `import { makeSpares, paths, withConversationLock } from ${JSON.stringify(join(ROOT, "dist/store/index.js"))};
      const p = paths({ dir: ${JSON.stringify(dir)} });
      // Its first lock finds that links can't be made; the conversation's lock is a file of its own.
      await withConversationLock(p.conversation("elsewhere"), async () => undefined);
      const conv = p.conversation(${JSON.stringify(conv.thread)});
      await withConversationLock(conv, async () => undefined);
      await makeSpares(conv);
      console.log("spared");
      setInterval(() => undefined, 60_000);`,
    ]);
    await child.line((l) => l === "spared");
    expect(readdirSync(conv.dir).filter((n) => n.startsWith(".holder-") || n.startsWith(".tmp-"))).toEqual([]);
    child.proc.kill("SIGKILL");
    await child.exit();
  }, 20_000);

  it("a process that exits while its spares are being made leaves none behind", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("exiting");
    const child = new Child(process.execPath, [
      "--input-type=module",
      "-e",
      `import { makeSpares, paths, withConversationLock } from ${JSON.stringify(join(ROOT, "dist/store/index.js"))};
      const conv = paths({ dir: ${JSON.stringify(dir)} }).conversation(${JSON.stringify(conv.thread)});
      await withConversationLock(conv, async () => undefined);
      void makeSpares(conv);
      // The file is made in the thread pool meanwhile; the event loop never comes round to take it.
      const t = Date.now(); while (Date.now() - t < 200) {}
      process.exit(0);`,
    ]);
    expect(await child.exit(), child.stderr).toEqual({ code: 0, signal: null });
    expect(readdirSync(conv.dir).filter((n) => n.startsWith(`.tmp-${child.proc.pid}-`) || n.startsWith(`.holder-${child.proc.pid}-`))).toEqual([]);
  }, 20_000);

  it.skipIf(spawnSync("unshare", ["--pid", "--fork", "--mount-proc", "true"]).status !== 0)("a daemon killed as pid 1 leaves spares the next pid 1 removes (once older than the stale period and than itself)", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("container");
    const store = JSON.stringify(join(ROOT, "dist/store/index.js"));
    const inNamespace = (script: string) => new Child("unshare", ["--pid", "--fork", "--mount-proc", "--kill-child", process.execPath, "--input-type=module", "-e", script]);
    const head = `import { makeSpares, paths, withConversationLock, sweepsSettled } from ${store};
      const conv = paths({ dir: ${JSON.stringify(dir)} }).conversation(${JSON.stringify(conv.thread)});
      if (process.pid !== 1) throw new Error("not pid 1: " + process.pid);`;
    const first = inNamespace(`${head}
      await withConversationLock(conv, async () => undefined, { stale: 2000 });
      await makeSpares(conv);
      console.log("spared");
      setInterval(() => undefined, 60_000);`);
    await first.line((l) => l === "spared");
    expect(temps(conv, 1)).toHaveLength(2);
    first.proc.kill("SIGKILL");
    await first.exit();
    // Some time on, as a restarted container's daemon comes up.
    const old = new Date(Date.now() - 60_000);
    for (const n of readdirSync(conv.dir).filter((n) => n.startsWith(".holder-1-") || n.startsWith(".tmp-1-"))) utimesSync(join(conv.dir, n), old, old);
    const next = inNamespace(`${head}
      await withConversationLock(conv, async () => undefined, { stale: 2000 });
      await makeSpares(conv);
      await sweepsSettled();
      console.log("swept " + JSON.stringify((await import("node:fs")).readdirSync(conv.dir).filter((n) => n.startsWith(".tmp-1-")).length));`);
    // Its own two spares are left, the gone one's removed.
    expect(await next.line((l) => l.startsWith("swept "))).toBe("swept 2");
    expect(await next.exit()).toEqual({ code: 0, signal: null });
  }, 20_000);

  it("a process's go as it exits; a killed process's go with its holder, when another process locks there", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("left");
    const ending = worker("spares", dir, conv.thread);
    await ending.line((l) => l === "spared");
    expect(temps(conv, ending.proc.pid)).toHaveLength(2);
    ending.send("stop\n");
    expect((await ending.exit()).code).toBe(0);
    expect(temps(conv, ending.proc.pid)).toEqual([]);

    const killed = worker("spares", dir, conv.thread);
    await killed.line((l) => l === "spared");
    killed.proc.kill("SIGKILL");
    expect((await killed.exit()).signal).toBe("SIGKILL");
    expect(temps(conv, killed.proc.pid)).toHaveLength(2);
    await withConversationLock(conv, async () => undefined);
    await sweepsSettled();
    expect(temps(conv, killed.proc.pid)).toEqual([]);
    expect(readdirSync(conv.dir).filter((n) => n.startsWith(`.holder-${killed.proc.pid}-`))).toEqual([]);
  }, 20_000);
});

describe("what another process left, taken over or looked at", () => {
  /** Whether a process can be made the only one of a machine of its own here: pid 1 of a pid namespace, under a host name of its own (root, unshare, hostname). */
  const canUnshare = spawnSync("unshare", ["--pid", "--fork", "--mount-proc", "--uts", "sh", "-c", "hostname machine-x"]).status === 0;

  it.skipIf(!canUnshare).each([
    ["a spare taken after the process idled past the stale period", true],
    ["a file made as its model answers for longer than the stale period", false],
  ])("another machine's live process's answer file is never removed under it: %s", async (_, spare) => {
    const dir = tempDir();
    const store = JSON.stringify(join(ROOT, "dist/store/index.js"));
    const protocol = JSON.stringify(join(ROOT, "dist/protocol/index.js"));
    // Each process as the only one of its machine: pid 1 of a pid namespace of its own, under a host name of its own.
    const onMachine = (host: string, script: string) =>
      new Child("unshare", ["--pid", "--fork", "--mount-proc", "--uts", "--kill-child", "sh", "-c", `hostname ${host} && exec "$0" --input-type=module -e "$1"`, process.execPath, script]);
    const head = `import { makeSpares, paths, withConversationLock, prepareEvent, beginEvent, sweepsSettled } from ${store};
      import { EVENT_VERSION } from ${protocol};
      import { createInterface } from "node:readline";
      const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
      const next = async () => (await lines.next()).value;
      const conv = paths({ dir: ${JSON.stringify(dir)} }).conversation("shared");`;
    const a = onMachine(
      "machine-a",
      `${head}
      await withConversationLock(conv, async () => undefined, { stale: 2000 });
      if (${spare}) await makeSpares(conv);
      console.log("ready");
      await next();
      await withConversationLock(conv, async () => {
        const prepared = await prepareEvent(conv);
        console.log("prepared " + prepared.made.path.split("/").pop());
        await next();
        const answer = { v: EVENT_VERSION, time: new Date().toISOString(), kind: "message", role: "assistant", text: "the answer", model: "m", provider: "p", latency_ms: 1, stop: "end_turn" };
        try {
          console.log("linked " + (await beginEvent(conv, answer, prepared, { waited: true }).link()));
        } catch (e) {
          console.log("failed " + e.message);
        }
      }, { stale: 2000 });`,
    );
    await a.line((l) => l === "ready");
    if (spare) await new Promise((r) => setTimeout(r, 2_300));
    a.send("turn\n");
    const prepared = (await a.line((l) => l.startsWith("prepared "))).slice("prepared ".length);
    expect(prepared.startsWith(".tmp-1-")).toBe(true);
    if (!spare) await new Promise((r) => setTimeout(r, 2_300));
    // Meanwhile the other machine's process, started since, finds the conversation busy, and looks for what gone processes left.
    const b = onMachine(
      "machine-b",
      `${head}
      try { await withConversationLock(conv, async () => undefined, { stale: 2000, wait: 300 }); console.log("locked"); }
      catch (e) { console.log("busy " + e.name); }
      await sweepsSettled();
      console.log("swept");`,
    );
    await b.line((l) => l === "swept");
    expect(b.stdout).toContain("busy LockTimeoutError");
    const left = readdirSync(join(dir, "chats", "shared")).includes(prepared);
    a.send("answer\n");
    const result = await a.line((l) => l.startsWith("linked ") || l.startsWith("failed "));
    expect({ left, result }).toEqual({ left: true, result: "linked 1" });
  }, 30_000);

  it.skipIf(!canUnshare)("a killed process whose pid is another live process's now: its holder goes with its lock once that is taken over, stale", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("reused");
    // Pid 1 of a pid namespace of its own: once killed, its pid is a live process's here (this machine's pid 1).
    const a = new Child("unshare", [
      "--pid",
      "--fork",
      "--mount-proc",
      "--kill-child",
      process.execPath,
      "--input-type=module",
      "-e",
      `import { makeSpares, paths, withConversationLock } from ${JSON.stringify(join(ROOT, "dist/store/index.js"))};
      const conv = paths({ dir: ${JSON.stringify(dir)} }).conversation(${JSON.stringify(conv.thread)});
      await withConversationLock(conv, async () => undefined, { stale: 2000 });
      await makeSpares(conv);
      await withConversationLock(conv, async () => { console.log("held"); setInterval(() => undefined, 60_000); await new Promise(() => undefined); }, { stale: 2000 });`,
    ]);
    await a.line((l) => l === "held");
    a.proc.kill("SIGKILL");
    await a.exit();
    const left = () => readdirSync(conv.dir).filter((n) => n.startsWith(".holder-1-") || n.startsWith(".tmp-1-") || n === ".lock");
    expect(left().length, "its holder, its lock and its spares").toBe(4);
    await withConversationLock(conv, async () => undefined, { stale: 2000 });
    await sweepsSettled();
    expect(left()).toEqual([]);
  }, 30_000);

  it("a killed process's holder, named with a pid a process that started later has now, is removed once older than the stale period", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("pid-taken");
    ensureConversation(conv);
    // Its holder made, then its process gone, then its pid another's: a process started well after.
    const made = join(conv.dir, "made-before");
    writeFileSync(made, "", { mode: 0o600 });
    await new Promise((r) => setTimeout(r, 2_600));
    const later = new Child(process.execPath, ["-e", "setInterval(() => undefined, 60_000)"]);
    const pid = later.proc.pid as number;
    const tag = "0123456789ab";
    const holder = join(conv.dir, `.holder-${pid}-${tag}-01234567`);
    renameSync(made, holder);
    writeFileSync(holder, JSON.stringify({ pid, host: hostname(), token: `${tag}-rest` }));
    const temp = join(conv.dir, `.tmp-${pid}-${tag}-abc-1`);
    writeFileSync(temp, "", { mode: 0o600 });
    // The same holder of the live process's own (made after it started): it stays, however old.
    const own = join(conv.dir, `.holder-${pid}-ba9876543210-01234567`);
    writeFileSync(own, JSON.stringify({ pid, host: hostname(), token: "ba9876543210-rest" }), { mode: 0o600 });
    const old = new Date(Date.now() - 60_000);
    for (const path of [holder, own]) utimesSync(path, old, old);
    await withConversationLock(conv, async () => undefined);
    await sweepsSettled();
    expect([existsSync(holder), existsSync(temp), existsSync(own)]).toEqual([false, false, true]);
    later.proc.kill("SIGKILL");
    await later.exit();
  }, 20_000);

  it("a process killed while it takes a gone process's lock over (the lock moved aside) leaves nothing once another locks there", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("aside");
    const holder = worker("hold", dir, conv.thread);
    await holder.line((l) => l === "held");
    holder.proc.kill("SIGKILL");
    await holder.exit();
    // Killed right after it moved the dead lock aside, before it removed it.
    const preload = join(dir, "kill-after-aside.mjs");
    writeFileSync(
      preload,
      `import fs from "node:fs"; import { syncBuiltinESMExports } from "node:module";
const rename = fs.renameSync;
fs.renameSync = (from, to) => { rename(from, to); if (String(from).endsWith("/.lock")) process.kill(process.pid, "SIGKILL"); };
syncBuiltinESMExports();\n`,
    );
    const taker = new Child(process.execPath, ["--import", preload, WORKER, "take", dir, conv.thread, "5000"]);
    expect((await taker.exit()).signal).toBe("SIGKILL");
    const others = () => readdirSync(conv.dir).filter((n) => (n.startsWith(".lock") || n.startsWith(".holder-") || n.startsWith(".tmp-")) && !n.startsWith(`.holder-${process.pid}-`));
    expect(others().length, "the lock moved aside, and the taker's holder").toBeGreaterThan(0);
    await withConversationLock(conv, async () => undefined);
    await sweepsSettled();
    expect(others()).toEqual([]);
  }, 30_000);
});

describe("the event schema", () => {
  it("changes nothing it accepts, so an event read is kept as parsed from its file", () => {
    const time = "2026-11-30T01:02:03.456+01:00";
    const events: unknown[] = [
      { v: 1, kind: "message", role: "user", time, text: "hi", header: "[h]" },
      {
        v: 1,
        kind: "message",
        role: "user",
        time,
        text: "see",
        header: "[h]",
        channel: "telegram",
        from: { id: "u", name: "Ann", owner: false },
        parts: [
          { type: "image_url", image_url: { url: "data:image/png;base64,AA==", detail: "low" } },
          { type: "file", file: { file_data: "data:application/pdf;base64,AA==", filename: "a.pdf" }, extra: 1 },
          { type: "text", text: "t" },
        ],
      },
      {
        v: 1,
        kind: "message",
        role: "assistant",
        time,
        text: "",
        model: "m",
        provider: "p",
        response_id: "r",
        usage: { in: 1, out: 2, cached: 0 },
        latency_ms: 3,
        cost: 0.5,
        thinking: { reasoning_content: "x", reasoning: "y", reasoning_details: [{ a: 1 }] },
        tool_calls: [{ id: "c", name: "t__x", arguments: "{}" }],
        stop: "tool_calls",
      },
      { v: 1, kind: "tool_result", time, call_id: "c", tool: "t__x", text: "ok", error: false, truncated: true },
      { v: 1, kind: "command", time, name: "/chat:fork", thread: "t", event: 3, from: { id: "u", owner: true } },
      { v: 1, kind: "failure", time, reason: "context_too_long", message: "m", sent: { messages: 1, tokens: 2 }, status: 400 },
    ];
    for (const e of events) expect(Event.parse(e)).toStrictEqual(e);
  });
});

describe("thread names", () => {
  const refused = ["../x", "a/b", ".hidden", "a\0b", "..", "x".repeat(300), "", ".", "a\\b", "a..b", "a\nb", "a\uD800b", "日".repeat(100)];

  it.each(refused.map((name) => [JSON.stringify(name).slice(0, 40), name]))("refuses %s", (_, name) => {
    const dir = tempDir();
    expect(() => paths({ dir }).conversation(name)).toThrow(InvalidNameError);
  });

  it.each([["telegram-12345"], ["whatsapp-120363042@g.us"], ["Über Café 日本語 🎉"], ["a".repeat(128)]])("takes %s as a folder of chats/", (name) => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation(name);
    ensureConversation(conv);
    expect(dirname(conv.dir)).toBe(join(dir, "chats"));
    expect(readdirSync(join(dir, "chats"))).toEqual([name]);
  });

  it("every name it takes is one folder of chats/, named exactly so", () => {
    const dir = tempDir();
    const chats = join(dir, "chats");
    fc.assert(
      // Short names, and names of every length up to the bound (in characters, of any plane).
      fc.property(fc.oneof(fc.string({ unit: "binary" }), fc.string({ unit: "binary", minLength: 40, maxLength: 130, size: "max" })), (name) => {
        let conv;
        try {
          conv = paths({ dir }).conversation(name);
        } catch (e) {
          if (e instanceof InvalidNameError) return;
          throw e;
        }
        ensureConversation(conv);
        expect(dirname(conv.dir)).toBe(chats);
        expect(readdirSync(chats)).toContain(name);
        rmSync(conv.dir, { recursive: true });
      }),
      { numRuns: 300 },
    );
  });

  it("a name is judged as the schema judges it, the first time and each time after (the valid ones remembered, within a bound)", () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: "binary" }), fc.constantFrom(...refused, "telegram-1", "a".repeat(128))), (name) => {
        const valid = Thread.safeParse(name).success;
        expect(isThread(name)).toBe(valid);
        expect(isThread(name)).toBe(valid);
      }),
      { numRuns: 500 },
    );
    // More names than are remembered: each still judged right, the refused ones refused.
    for (let i = 0; i < 10_000; i++) expect(isThread(`thread-${i}`)).toBe(true);
    for (const name of refused) expect(isThread(name)).toBe(false);
    expect(isThread("thread-0")).toBe(true);
  });
});

describe("an event appended right after what its writer read (appendEventAfter)", () => {
  const other = (e: Event): boolean => !(e.kind === "message" && e.text === "stop");
  it("lands right after it, or after events written since that it may follow", async () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    await appendEvent(conv, userMessage("one"));
    expect(await appendEventAfter(conv, userMessage("two"), 1, other)).toBe(2);
    // Read at 2; two more written since, both of which it may follow.
    await appendEvent(conv, userMessage("three"));
    await appendEvent(conv, userMessage("four"));
    expect(await appendEventAfter(conv, userMessage("five"), 2, other)).toBe(5);
    expect(readEventsFrom(conv, 1).map((e) => (e.event.kind === "message" ? e.event.text : ""))).toEqual(["one", "two", "three", "four", "five"]);
  });

  it("writes nothing, and leaves no file, when an event written since is one it may not follow", async () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    await appendEvent(conv, userMessage("one"));
    await appendEvent(conv, userMessage("stop"));
    await appendEvent(conv, userMessage("after"));
    const files = readdirSync(conv.dir).sort();
    expect(await appendEventAfter(conv, userMessage("late"), 1, other)).toBeUndefined();
    expect(readdirSync(conv.dir).sort()).toEqual(files);
    expect(lastEventNumber(conv)).toBe(3);
  });
});

describe("an event file that fails its schema", () => {
  const bad: [string, string][] = [
    ["not JSON", "{\"v\": 1, \"kind\": "],
    ["an empty file", ""],
    ["a wrong-shaped object", JSON.stringify({ v: 1, kind: "message", role: "user" })],
    ["another format version", JSON.stringify({ ...userMessage("hi"), v: 2 })],
  ];
  it.each(bad)("makes readEventsFrom throw, naming the file, for %s", async (_, text) => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("t");
    await appendEvent(conv, userMessage("one"));
    writeFileSync(conv.event(2), text);
    writeFileSync(conv.event(3), `${JSON.stringify(userMessage("three"))}\n`);
    let error: unknown;
    try {
      readEventsFrom(conv, 1);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(StoreError);
    expect((error as StoreError).message).toContain(conv.event(2));
    expect((error as StoreError).path).toBe(conv.event(2));
  });

  it("is refused when written, too", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("t");
    const wrong = { ...userMessage("x"), role: "owner" };
    // @ts-expect-error a wrong-shaped event, as a caller's bug would pass it
    await expect(appendEvent(conv, wrong)).rejects.toThrow(StoreError);
    expect(existsSync(conv.event(1))).toBe(false);
  });
});

describe("an agent's paths", () => {
  it("are its folders' own, however many agents a process names, and a conversation's are a new object at each call", () => {
    const root = tempDir();
    for (let i = 0; i < 3000; i++) {
      const dir = join(root, `a${i % 1500}`);
      const files = i % 3 === 0 ? undefined : join(root, `f${i}`);
      const p = paths(files === undefined ? { dir } : { dir, files });
      expect(p.config).toBe(join(dir, "config.json"));
      expect(p.files).toBe(files ?? dir);
      expect(p.home).toBe(files ?? dir);
      const c = p.conversation(`t${i % 7}`);
      expect(c.dir).toBe(join(dir, "chats", `t${i % 7}`));
      expect(c.event(3)).toBe(join(dir, "chats", `t${i % 7}`, eventName(3)));
    }
    // A held lock's folder is found by the very paths object it was taken with: another caller's
    // paths of the same conversation are another object, so its writes open a folder of their own.
    const again = [paths({ dir: root }).conversation("t"), paths({ dir: root }).conversation("t")];
    expect(again[0]).not.toBe(again[1]);
    expect(JSON.stringify(again[0])).toBe(JSON.stringify(again[1]));
    // A name refused is refused each time, never kept.
    expect(() => paths({ dir: root }).conversation("../x")).toThrow(InvalidNameError);
    expect(() => paths({ dir: root }).conversation("../x")).toThrow(InvalidNameError);
  });

  it("a conversation's events the process keeps are its folder's: one removed and made again at once is read anew, and numbered from its own", async () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    const texts = () => readEventsFrom(conv, 1).map((e) => ("text" in e.event ? e.event.text : e.event.kind));
    await appendEvent(conv, userMessage("old one"));
    await appendEvent(conv, userMessage("old two"));
    expect(texts()).toEqual(["old one", "old two"]);
    // Made again at once, as another process would: on ext4, often with the same inode.
    rmSync(conv.dir, { recursive: true });
    mkdirSync(conv.dir, { mode: 0o700 });
    writeFileSync(conv.event(1), `${JSON.stringify(userMessage("new one"))}\n`, { mode: 0o600 });
    // One event, kept, asked for alone outside a lock: the folder is looked at first.
    expect(readEvent(conv, 1)).toMatchObject({ text: "new one" });
    expect(readEvent(conv, 2)).toBeUndefined();
    expect(texts()).toEqual(["new one"]);
    expect(await appendEvent(conv, userMessage("new two"))).toBe(2);
    expect(texts()).toEqual(["new one", "new two"]);
    // Under a lock too, through the folder it holds.
    rmSync(conv.dir, { recursive: true });
    mkdirSync(conv.dir, { mode: 0o700 });
    expect(await withConversationLock(conv, async () => [readEvent(conv, 1), await appendEvent(conv, userMessage("newest"))])).toEqual([undefined, 1]);
  });

  it("a folder replaced by a link after it was read through is refused at the next read", () => {
    const dir = tempDir();
    mkdirSync(join(dir, "instructions"));
    writeFileSync(join(dir, "instructions", "instruction.md"), "mine\n");
    expect(readStanding({ dir })).toBe("mine\n");
    const outside = tempDir();
    writeFileSync(join(outside, "instruction.md"), "planted\n");
    rmSync(join(dir, "instructions"), { recursive: true });
    symlinkSync(outside, join(dir, "instructions"));
    expect(() => readStanding({ dir })).toThrow(StoreError);
  });
});

describe("links are refused, not followed", () => {
  /** A valid event outside the agent's folder, which a followed link would read as the conversation's. */
  function outsideEvent(): string {
    const path = join(tempDir(), "planted.json");
    writeFileSync(path, `${JSON.stringify(userMessage("planted"))}\n`);
    return path;
  }

  it("an event file that is a link", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("t");
    await appendEvent(conv, userMessage("one"));
    symlinkSync(outsideEvent(), conv.event(2));
    expect(() => readEventsFrom(conv, 1)).toThrow(StoreError);
    expect(() => readEventsFrom(conv, 1)).toThrow(conv.event(2));
  });

  it("under its lock, a conversation is read through the folder the lock holds: chats/ swapped for a link meanwhile is never read", async () => {
    const outside = tempDir();
    mkdirSync(join(outside, "t"));
    for (const n of [1, 2]) writeFileSync(join(outside, "t", eventName(n)), `${JSON.stringify(userMessage(`planted ${n}`))}\n`);
    writeFileSync(join(outside, "t", "window.json"), "{}");
    writeFileSync(join(outside, "t", "transcript.md"), "planted");
    const dir = tempDir();
    const conv = paths({ dir }).conversation("t");
    await appendEvent(conv, userMessage("one"));
    appendTranscript(conv, "kept");
    forgetEvents();
    const read = await withConversationLock(conv, async () => {
      renameSync(join(dir, "chats"), join(dir, "chats-aside"));
      symlinkSync(outside, join(dir, "chats"));
      return [readEventsFrom(conv, 1).map((e) => (e.event as { text: string }).text), readEvent(conv, 2), readMark(conv), transcriptTail(conv)];
    });
    expect(read).toEqual([["one"], undefined, undefined, "kept"]);
    // Without the lock, the same paths are refused, as any read through a link is.
    forgetEvents();
    expect(() => readEventsFrom(conv, 1)).toThrow(StoreError);
    expect(() => transcriptTail(conv)).toThrow(StoreError);
  });

  it("under its lock, a look for the events written since the last known finds a link or a FIFO there refused, never followed or waited on", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("t");
    await appendEvent(conv, userMessage("one"));
    symlinkSync(outsideEvent(), conv.event(2));
    await withConversationLock(conv, async () => {
      expect(() => readEventsFrom(conv, 2)).toThrow(`refused: event ${conv.event(2)} is a symbolic link`);
    });
    rmSync(conv.event(2));
    expect(spawnSync("mkfifo", [conv.event(2)]).status).toBe(0);
    await withConversationLock(conv, async () => {
      expect(() => readEventsFrom(conv, 2)).toThrow(`refused: ${conv.event(2)} is not a regular file`);
    });
    rmSync(conv.event(2));
    await withConversationLock(conv, async () => {
      expect(readEventsFrom(conv, 2)).toEqual([]);
    });
  });

  it("a conversation folder, or chats/, that is a link", async () => {
    const outside = tempDir();
    writeFileSync(join(outside, eventName(1)), `${JSON.stringify(userMessage("planted"))}\n`);
    const dir = tempDir();
    mkdirSync(join(dir, "chats"));
    symlinkSync(outside, join(dir, "chats", "t"));
    const conv = paths({ dir }).conversation("t");
    expect(() => readEventsFrom(conv, 1)).toThrow(StoreError);
    await expect(appendEvent(conv, userMessage("x"))).rejects.toThrow(StoreError);

    const dir2 = tempDir();
    mkdirSync(join(outside, "t"));
    writeFileSync(join(outside, "t", eventName(1)), `${JSON.stringify(userMessage("planted"))}\n`);
    symlinkSync(outside, join(dir2, "chats"));
    expect(() => readEventsFrom(paths({ dir: dir2 }).conversation("t"), 1)).toThrow(StoreError);
    await expect(appendEvent(paths({ dir: dir2 }).conversation("u"), userMessage("x"))).rejects.toThrow(StoreError);
    // Not read one by one, not listed, not numbered, not found as threads.
    expect(() => readEvent(conv, 1)).toThrow(StoreError);
    expect(() => listEventNumbers(conv)).toThrow(StoreError);
    expect(() => lastEventNumber(paths({ dir: dir2 }).conversation("t"))).toThrow(StoreError);
    expect(() => listThreads(paths({ dir: dir2 }).chats)).toThrow(StoreError);
    // Nothing was written through either link.
    expect(readdirSync(outside).sort()).toEqual([eventName(1), "t"]);
    expect(readdirSync(join(outside, "t"))).toEqual([eventName(1)]);
  });

  it("instructions/instruction.md, or instructions/, that is a link", () => {
    const secret = join(tempDir(), "secret.txt");
    writeFileSync(secret, "the machine's own file\n");
    const dir = tempDir();
    const p = paths({ dir });
    mkdirSync(p.instructions);
    symlinkSync(secret, p.instruction);
    expect(() => readStanding({ dir })).toThrow(StoreError);

    const dir2 = tempDir();
    const linkedFolder = tempDir();
    writeFileSync(join(linkedFolder, "instruction.md"), "planted\n");
    symlinkSync(linkedFolder, paths({ dir: dir2 }).instructions);
    expect(() => readStanding({ dir: dir2 })).toThrow(StoreError);

    // The same file, planted for real, is read.
    const dir3 = tempDir();
    mkdirSync(paths({ dir: dir3 }).instructions);
    writeFileSync(paths({ dir: dir3 }).instruction, "be brief\n");
    expect(readStanding({ dir: dir3 })).toBe("be brief\n");
  });

  it("notes, config.json and a conversation's derived files that are links", () => {
    const target = join(tempDir(), "target.txt");
    writeFileSync(target, "outside\n");
    const dir = tempDir();
    const p = paths({ dir });
    mkdirSync(p.memory);
    symlinkSync(target, p.notes);
    expect(() => readNotes({ dir })).toThrow(StoreError);
    symlinkSync(target, p.config);
    expect(() => readSettings({ dir })).toThrow(StoreError);

    const conv = p.conversation("t");
    ensureConversation(conv);
    symlinkSync(target, conv.transcript);
    symlinkSync(target, conv.tools);
    symlinkSync(target, conv.window);
    expect(() => readTranscript(conv)).toThrow(StoreError);
    expect(() => transcriptTail(conv)).toThrow(StoreError);
    expect(() => readToolsList(conv)).toThrow(StoreError);
    expect(() => readMark(conv)).toThrow(StoreError);
    // Named by the conversation's path, never the descriptor's (/proc/self/fd/...) it is opened through.
    expect(() => appendTranscript(conv, "added\n")).toThrow(new StoreError(`refused: ${conv.transcript} is a symbolic link`, conv.transcript));
    expect(readFileSync(target, "utf8")).toBe("outside\n");
  });

  it("skills: a skill folder that is a link, or named as no skill may be, is left out; a linked SKILL.md is refused", () => {
    const outside = tempDir();
    writeFileSync(join(outside, "SKILL.md"), "---\nname: planted\ndescription: from outside\n---\n");
    const dir = tempDir();
    const p = paths({ dir });
    for (const name of ["real", ".hidden", "a b", "x".repeat(200)]) {
      mkdirSync(join(p.skills, name), { recursive: true });
      writeFileSync(join(p.skills, name, "SKILL.md"), `---\nname: ${name.slice(0, 20)}\ndescription: d\n---\n`);
    }
    symlinkSync(outside, join(p.skills, "linked"));
    expect(listSkills({ dir }).map((s) => s.name)).toEqual(["a b", "real"]);
    for (const skill of listSkills({ dir })) expect(skill.path.startsWith(p.skills)).toBe(true);

    // A SKILL.md that is a link to a file outside: refused, never read.
    symlinkSync(join(outside, "SKILL.md"), join(p.skills, "real", "linked.md"));
    rmSync(join(p.skills, "real", "SKILL.md"));
    symlinkSync(join(outside, "SKILL.md"), join(p.skills, "real", "SKILL.md"));
    expect(() => listSkills({ dir })).toThrow(StoreError);
  });

  it("writing settings over a linked config.json replaces the link, leaving its target alone", () => {
    const target = join(tempDir(), "target.json");
    writeFileSync(target, "untouched\n");
    const dir = tempDir();
    symlinkSync(target, paths({ dir }).config);
    writeSettings({ dir }, { model: { provider: "p", name: "m", base_url: "http://127.0.0.1:1/v1" } });
    expect(readFileSync(target, "utf8")).toBe("untouched\n");
    expect(readSettings({ dir })?.model.name).toBe("m");
  });
});

describe("files of any size", () => {
  it("are read whole, however their size falls against the read buffer, and a character across its edge too", () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("t");
    ensureConversation(conv);
    const KIB64 = 64 * 1024;
    // Files of these sizes in bytes: around the 64 KiB buffer, and several times it.
    const sizes = [1, KIB64 - 1, KIB64, KIB64 + 1, 2 * KIB64, 5 * KIB64 + 3];
    sizes.forEach((size, i) => {
      const event = { v: EVENT_VERSION, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", header: "h", text: "" };
      const empty = Buffer.byteLength(`${JSON.stringify(event)}\n`);
      // "é" is two bytes: it straddles the buffer's edge wherever the size puts it there.
      const fill = size - empty;
      const text = fill > 0 ? "é".repeat(Math.floor(fill / 2)) + "x".repeat(fill % 2) : "";
      writeFileSync(conv.event(i + 1), `${JSON.stringify({ ...event, text })}\n`);
    });
    // Read by this process for the first time (nothing cached): each whole, as written.
    forgetEvents();
    const read = readEventsFrom(conv, 1);
    expect(read.map((e) => e.n)).toEqual(sizes.map((_, i) => i + 1));
    read.forEach(({ n, event }) => expect(`${JSON.stringify(event)}\n`).toBe(readFileSync(conv.event(n), "utf8")));
    // The settings' other files the same way: notes of 300 KiB.
    const notes = "ü".repeat(150 * 1024) + "\n";
    mkdirSync(join(dir, "memory"), { recursive: true });
    writeFileSync(join(dir, "memory", "notes.md"), notes);
    expect(readNotes({ dir })).toBe(notes);
  });
});

describe("an event over the most one holds", () => {
  it("is refused by its bytes, as it would be read back, not its characters; nothing of it is written", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("t");
    const event = (text: string) => ({ v: EVENT_VERSION, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", header: "h", text }) as Event;
    // 23 million characters of three bytes each: under the limit by its characters, over it by its 69 MB.
    const wide = "漢".repeat(23 * 1024 * 1024);
    expect(wide.length).toBeLessThan(LIMITS.event);
    await expect(appendEvent(conv, event(wide))).rejects.toThrow(/refused to write an event of \d+ bytes: over the limit of 67108864/);
    expect(existsSync(conv.dir) ? readdirSync(conv.dir) : []).toEqual([]);
    // Under it by its bytes, it is written and reads back whole.
    const under = "漢".repeat(1024 * 1024);
    await appendEvent(conv, event(under));
    forgetEvents();
    expect(readEventsFrom(conv, 1).map((e) => (e.event as { text: string }).text)).toEqual([under]);
  });
});

describe("the derived files beside the events", () => {
  it("an owed file's removal never makes again a conversation folder that is gone", () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    const name = writeOwed(conv, "owed-1-a", 0);
    expect(readdirSync(conv.dir)).toContain(name);
    rmSync(conv.dir, { recursive: true });
    removeOwed(conv, name);
    expect(existsSync(conv.dir)).toBe(false);
  });

  it("no write makes again an agent's folder that is gone (the agent removed while a process serves it)", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("t");
    rmSync(dir, { recursive: true });
    expect(() => writeOwed(conv, "owed-1-a", 0)).toThrow(/the agent.s folder .* is missing or not a folder/);
    await expect(appendEvent(conv, { v: 1, kind: "command", name: "/new", time: new Date().toISOString() })).rejects.toThrow(StoreError);
    expect(existsSync(dir)).toBe(false);
    // A file where the agent's folder was: refused too, and left as it is.
    writeFileSync(dir, "not a folder");
    expect(() => writeOwed(conv, "owed-1-a", 0)).toThrow(/ENOTDIR|not a folder/);
    expect(readFileSync(dir, "utf8")).toBe("not a folder");
    rmSync(dir);
    // Its own folder there, a conversation's folder and chats/ are made as before.
    mkdirSync(dir);
    expect(writeOwed(conv, "owed-1-a", 0)).toBe("owed-1-a-0");
    expect(readdirSync(conv.dir)).toEqual(["owed-1-a-0"]);
  });

  it("the transcript is added to, read, tailed and made again", () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    expect(readTranscript(conv)).toBeUndefined();
    expect(transcriptTail(conv)).toBeUndefined();
    appendTranscript(conv, "**You:** hi\n\n");
    appendTranscript(conv, "**Agent:** hello\n\n");
    expect(readTranscript(conv)).toBe("**You:** hi\n\n**Agent:** hello\n\n");
    expect(transcriptTail(conv, 9)).toBe("* hello\n\n");
    replaceTranscript(conv, "again\n");
    expect(readTranscript(conv)).toBe("again\n");
  });

  it("window.json: a mark reads back; a missing, garbage or wrong-shaped one is undefined", () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    expect(readMark(conv)).toBeUndefined();
    const mark: WindowMark = { v: 1, event: 7, time: "2026-01-02T03:04:05.000Z", tokens_before: 1234, budget: 30_000 };
    writeMark(conv, mark);
    expect(readMark(conv)).toEqual(mark);
    for (const garbage of ["", "{not json", "null", "[]", JSON.stringify({ ...mark, v: 2 }), JSON.stringify({ ...mark, event: 0 }), JSON.stringify({ ...mark, extra: 1 })]) {
      writeFileSync(conv.window, garbage);
      expect(readMark(conv), garbage).toBeUndefined();
    }
    // A mark that fails its schema is never written.
    expect(() => writeMark(conv, { ...mark, tokens_before: -1 })).toThrow();
    expect(readFileSync(conv.window, "utf8")).toBe(JSON.stringify({ ...mark, extra: 1 }));
  });

  it("tools.json: the first list is kept, a later one narrows it and never widens it", () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    expect(readToolsList(conv)).toBeUndefined();
    expect(narrowToolsList(conv, ["memory__search", "memory__read", "fs", "memory__search"])).toEqual(["memory__search", "memory__read", "fs"]);
    expect(narrowToolsList(conv, ["memory__search", "fs", "shell"])).toEqual(["memory__search", "fs"]);
    expect(readToolsList(conv)).toEqual(["memory__search", "fs"]);
    expect(narrowToolsList(conv, ["memory__search", "memory__read", "fs", "shell", "web"])).toEqual(["memory__search", "fs"]);
    expect(narrowToolsList(conv, [])).toEqual([]);
    expect(narrowToolsList(conv, ["memory__search", "fs"])).toEqual([]);
    expect(readToolsList(conv)).toEqual([]);
  });

  it("tools.json that fails its schema is an error naming it (it is not derived: nothing to make it again from)", () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    ensureConversation(conv);
    for (const garbage of ["{oops", JSON.stringify({ v: 1, tools: "memory" })]) {
      writeFileSync(conv.tools, garbage);
      expect(() => readToolsList(conv)).toThrow(conv.tools);
      expect(() => narrowToolsList(conv, ["memory"])).toThrow(StoreError);
      expect(readFileSync(conv.tools, "utf8")).toBe(garbage);
    }
  });
});

describe("hostile files in the agent's folder", () => {
  const mkfifo = (path: string) => expect(spawnSync("mkfifo", [path]).status).toBe(0);

  /** Whether chattr(1) can make a folder immutable here (root, on a file system that has the flag). */
  const immutable = (() => {
    const dir = mkdtempSync(join(tmpdir(), "lnk-store-chattr-"));
    const ok = spawnSync("chattr", ["+i", dir]).status === 0;
    spawnSync("chattr", ["-i", dir]);
    rmSync(dir, { recursive: true, force: true });
    return ok;
  })();
  const openFds = () => readdirSync("/proc/self/fd").length;

  it.skipIf(!immutable)("a conversation's folder open to others that can't be made private is refused in words, and nothing of it is left open", async () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("t");
    await appendEvent(conv, userMessage("before"));
    // Open to others, as an earlier version made it, and immutable: no chmod can take.
    spawnSync("chmod", ["0755", conv.dir]);
    expect(spawnSync("chattr", ["+i", conv.dir]).status).toBe(0);
    try {
      forgetEvents();
      const before = openFds();
      for (let i = 0; i < 5; i++) await expect(appendEvent(conv, userMessage("refused"))).rejects.toThrow(`cannot make ${conv.dir} private (mode 0700): EPERM`);
      expect(openFds()).toBe(before);
    } finally {
      spawnSync("chattr", ["-i", conv.dir]);
    }
    expect(listEventNumbers(conv)).toEqual([1]);
  });

  it("a FIFO, a folder or a socket where a file should be is refused at once, never waited on", () => {
    const dir = tempDir();
    const p = paths({ dir });
    const conv = p.conversation("t");
    ensureConversation(conv);
    mkfifo(conv.event(1));
    expect(() => readEventsFrom(conv, 1)).toThrow(`${conv.event(1)} is not a regular file`);
    mkdirSync(p.instructions);
    mkfifo(p.instruction);
    expect(() => readStanding({ dir })).toThrow("is not a regular file");
    mkdirSync(p.notes, { recursive: true });
    expect(() => readNotes({ dir })).toThrow("is not a regular file");
    mkfifo(p.config);
    expect(() => readSettings({ dir })).toThrow("is not a regular file");
    mkfifo(conv.tools);
    expect(() => readToolsList(conv)).toThrow("is not a regular file");
    // Derived files: one that isn't a regular file is made again.
    mkfifo(conv.window);
    expect(readMark(conv)).toBeUndefined();
    mkfifo(conv.transcript);
    expect(transcriptTail(conv)).toBe("");
    expect(() => appendTranscript(conv, "added\n")).toThrow("is not a regular file");
    replaceTranscript(conv, "made again\n");
    expect(readTranscript(conv)).toBe("made again\n");
  });

  it("skills/ that is a link is refused; so is a folder on the way that is a file", () => {
    const outside = tempDir();
    mkdirSync(join(outside, "planted"));
    writeFileSync(join(outside, "planted", "SKILL.md"), "---\nname: planted\ndescription: from outside\n---\n");
    const dir = tempDir();
    symlinkSync(outside, paths({ dir }).skills);
    expect(() => listSkills({ dir })).toThrow(`${paths({ dir }).skills} is a symbolic link`);
    const dir2 = tempDir();
    writeFileSync(paths({ dir: dir2 }).instructions, "a file where a folder should be\n");
    expect(() => readStanding({ dir: dir2 })).toThrow("is not a folder");
  });

  it("a file the harness only reads with a second name (a hard link) is refused; an event with one is read", async () => {
    const secret = join(tempDir(), "secret.txt");
    writeFileSync(secret, "a 0600 file of the machine\n", { mode: 0o600 });
    const dir = tempDir();
    const p = paths({ dir });
    mkdirSync(p.instructions);
    mkdirSync(p.memory);
    mkdirSync(join(p.skills, "s"), { recursive: true });
    linkSync(secret, p.instruction);
    linkSync(secret, p.notes);
    linkSync(secret, join(p.skills, "s", "SKILL.md"));
    expect(() => readStanding({ dir })).toThrow("has 4 names (a hard link)");
    expect(() => readNotes({ dir })).toThrow("has 4 names (a hard link)");
    expect(() => listSkills({ dir })).toThrow("has 4 names (a hard link)");
    const settings = join(tempDir(), "config.json");
    writeFileSync(settings, JSON.stringify({ model: { provider: "p", name: "m", base_url: "http://127.0.0.1:1/v1", key: "sk-other-agent" } }));
    linkSync(settings, p.config);
    expect(() => readSettings({ dir })).toThrow("has 2 names (a hard link)");

    // A conversation snapshotted with hard links (cp -al) reads as the original.
    const conv = p.conversation("t");
    await appendEvent(conv, userMessage("one"));
    await appendEvent(conv, userMessage("two"));
    const copy = paths({ dir: tempDir() });
    expect(spawnSync("cp", ["-al", p.chats, copy.chats]).status).toBe(0);
    forgetEvents();
    expect(readEventsFrom(copy.conversation("t"), 1).map((e) => "text" in e.event && e.event.text)).toEqual(["one", "two"]);
  });

  it("a copy with a second name (a hard link, maybe outside the agent's folder) is never added to: it is made again, the other name left as it was", () => {
    const outside = join(tempDir(), "copy-of-another.md");
    // Ends as a copy ends: added to, were its tail all that was looked at.
    const theirs = "**Owner** · 2026-01-01 00:00 UTC\nsomeone else's words\n<!-- answer 0 -->\n\n";
    writeFileSync(outside, theirs, { mode: 0o600 });
    const conv = paths({ dir: tempDir() }).conversation("t");
    ensureConversation(conv);
    linkSync(outside, conv.transcript);
    expect(transcriptTail(conv)).toBe("");
    expect(() => appendTranscript(conv, "added\n")).toThrow("has 2 names (a hard link): nothing is added to it");
    replaceTranscript(conv, "made again\n");
    expect(readTranscript(conv)).toBe("made again\n");
    expect(readFileSync(outside, "utf8")).toBe(theirs);
    // Its own name again: added to as any copy is.
    appendTranscript(conv, "added\n");
    expect(readTranscript(conv)).toBe("made again\nadded\n");
  });

  it("an event that is not JSON is named, never quoted: it may be a file with a secret", () => {
    const dir = tempDir();
    const conv = paths({ dir }).conversation("t");
    ensureConversation(conv);
    writeFileSync(conv.event(1), "SECRET-TOKEN sk-live-0123456789 {");
    let message = "";
    try {
      readEventsFrom(conv, 1);
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toContain(`event ${conv.event(1)} is not JSON`);
    expect(message).not.toMatch(/SECRET|sk-live/);
  });

  it("a .lock that is a dangling link or a FIFO is taken at once, not after the stale period", async () => {
    for (const plant of [(lock: string) => symlinkSync("/nonexistent/lock", lock), mkfifo]) {
      const conv = paths({ dir: tempDir() }).conversation("t");
      ensureConversation(conv);
      plant(conv.lock);
      // Waiting less than the shortest stale period: only a lock taken at once gets in.
      expect(await withConversationLock(conv, async () => "held", { stale: 2000, wait: 1000 })).toBe("held");
      expect(existsSync(conv.lock)).toBe(false);
    }
  });

  it("a lock whose file is another file now, even one saying the same, is lost: nothing more is written", async () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    ensureConversation(conv);
    const fds = () => readdirSync("/proc/self/fd").length;
    // Another test's look for gone processes' holders, under way, holds a folder open for a moment.
    await sweepsSettled();
    const before = fds();
    let text = "";
    const outcome = withConversationLock(conv, async () => {
      await appendEvent(conv, userMessage("written while held"));
      // Another process's file in its place, word for word: a copy, so a file of its own.
      text = readFileSync(conv.lock, "utf8");
      rmSync(conv.lock);
      writeFileSync(conv.lock, text);
      await appendEvent(conv, userMessage("never written"));
    });
    await expect(outcome).rejects.toThrow(/its lock was lost \(another process holds it\)/);
    forgetEvents();
    expect(readEventsFrom(conv, 1).map((e) => "text" in e.event && e.event.text)).toEqual(["written while held"]);
    // The other's lock is left where it is: letting go of a lost lock never removes the one there now.
    expect(readFileSync(conv.lock, "utf8")).toBe(text);
    // The lock's own file, kept open while held, is let go with it.
    await sweepsSettled();
    expect(fds()).toBe(before);
    rmSync(conv.lock);
    expect(await withConversationLock(conv, async () => fds())).toBe(before + 2);
    await sweepsSettled();
    expect(fds()).toBe(before);
  });

  it("a lock swapped for a link to a file outside, its time the lock's, is lost at its refresh; the file outside keeps its times", async () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    ensureConversation(conv);
    const outside = join(tempDir(), "target.txt");
    writeFileSync(outside, "not the agent's\n");
    const old = new Date("2000-01-01T00:00:00Z");
    utimesSync(outside, old, old);
    let lost!: (message: string) => void;
    const compromised = new Promise<string>((resolve) => (lost = resolve));
    let why = "";
    await withConversationLock(
      conv,
      async () => {
        // The link's own time set to the lock's, so the refresh's look (an lstat) finds it as it left it.
        const m = lstatSync(conv.lock).mtime;
        const link = join(conv.dir, "link-tmp");
        symlinkSync(outside, link);
        lutimesSync(link, m, m);
        renameSync(link, conv.lock);
        // Refreshed every half stale period: waits for the refresh that finds the lock lost.
        why = await compromised;
      },
      { stale: 2_000, onCompromised: (e) => lost(e.message) },
    );
    expect(statSync(outside).mtime.getTime()).toBe(old.getTime());
    expect(why).toBe("the lock file was replaced or removed");
    expect(lstatSync(conv.lock).isSymbolicLink()).toBe(true);
  });

  it("parsed events are held to their bound in bytes, however many long conversations are read", () => {
    const dir = tempDir();
    const big = userMessage("y".repeat(1024 * 1024));
    const line = `${JSON.stringify(big)}\n`;
    const { max } = cachedEventBytes();
    forgetEvents();
    // Three conversations, each over half the bound: together well over it.
    for (const thread of ["a", "b", "c"]) {
      const conv = paths({ dir }).conversation(thread);
      ensureConversation(conv);
      const count = Math.ceil(max / 2 / line.length) + 1;
      for (let n = 1; n <= count; n++) writeFileSync(conv.event(n), line);
      expect(readEventsFrom(conv, 1)).toHaveLength(count);
      expect(cachedEventBytes().held).toBeLessThanOrEqual(max);
    }
    forgetEvents();
  });

  it("no temporary file outlives a failed write (a file size limit here)", async () => {
    const dir = tempDir();
    const run = spawnSync("sh", ["-c", 'ulimit -f 8; exec "$@"', "sh", process.execPath, WORKER, "big", dir, "t", String(64 * 1024)], { encoding: "utf8" });
    expect(run.stdout.trim().split("\n")).toEqual(["append failed EFBIG", "replace failed EFBIG"]);
    expect(readdirSync(paths({ dir }).conversation("t").dir)).toEqual([]);
  });
});

describe("a derived file read again", () => {
  it("is read whole at each call: the window's mark written meanwhile is the one read, a bad one none, the same text the same frozen value", () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    ensureConversation(conv);
    const time = new Date().toISOString();
    const mark: WindowMark = { v: 1, event: 3, time, tokens_before: 10, budget: 1000 };
    writeMark(conv, mark);
    const first = readMark(conv);
    expect(first).toEqual(mark);
    expect(readMark(conv)).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    // Written by another process, in place: the same length, another number.
    writeFileSync(conv.window, readFileSync(conv.window, "utf8").replace('"event":3', '"event":5'));
    expect(readMark(conv)).toEqual({ ...mark, event: 5 });
    writeFileSync(conv.window, "{ not json");
    expect(readMark(conv)).toBeUndefined();
    writeFileSync(conv.window, `${JSON.stringify({ ...mark, extra: 1 })}\n`);
    expect(readMark(conv)).toBeUndefined();
    writeMark(conv, mark);
    expect(readMark(conv)).toEqual(mark);
    // A link put where it was is refused, as before it was read.
    rmSync(conv.window);
    symlinkSync(join(conv.dir, "elsewhere.json"), conv.window);
    expect(() => readMark(conv)).toThrow(StoreError);
  });
});

describe("a conversation's paths", () => {
  it("are what join makes of its folder and its files' names, for any thread and the store's own names", () => {
    const p = paths({ dir: "/tmp/agent-dir/../agent-dir/./x/" });
    const check = (conv: ConversationPaths, name: string) => {
      const dir = join(p.chats, name);
      expect(conv.dir).toBe(dir);
      expect([conv.transcript, conv.window, conv.usage, conv.tools, conv.lock, conv.event(12)]).toEqual(
        ["transcript.md", "window.json", "usage.json", "tools.json", ".lock", "000000000012.json"].map((f) => join(dir, f)),
      );
    };
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 40, unit: "grapheme" }), (name) => {
        fc.pre(Thread.safeParse(name).success);
        check(p.conversation(name), name);
      }),
      { numRuns: 500 },
    );
    for (const name of [".import-host-1-ab", "a b", "é"]) check(conversationIn(p.chats, name), name);
  });
});

describe("whether another process holds a conversation's lock", () => {
  it("says so only for a live process of this machine other than this one, or another machine's fresh lock, whatever the lock holds", () => {
    const conv = paths({ dir: tempDir() }).conversation("t");
    ensureConversation(conv);
    const gone = gonePid();
    const owner = fc.record({ pid: fc.constantFrom(process.pid, process.ppid, gone, 0, -1, 2 ** 31), host: fc.constantFrom(hostname(), "elsewhere", ""), folder: fc.option(fc.string(), { nil: undefined }) });
    const lock = fc.oneof(
      owner.map((o) => ({ text: JSON.stringify(o), owner: o })),
      fc.oneof(fc.string(), fc.json(), fc.constant("{"), fc.constant('{"pid":"1","host":"h"}')).map((text) => ({ text, owner: undefined })),
      fc.constantFrom("link", "folder", "none").map((kind) => ({ text: kind, owner: undefined, kind })),
    );
    fc.assert(
      fc.property(lock, fc.boolean(), (l, old) => {
        rmSync(conv.lock, { recursive: true, force: true });
        const kind = "kind" in l ? l.kind : "file";
        if (kind === "link") symlinkSync(join(conv.dir, "elsewhere"), conv.lock);
        else if (kind === "folder") mkdirSync(conv.lock);
        else if (kind === "file") writeFileSync(conv.lock, l.text);
        if (kind === "file" && old) utimesSync(conv.lock, new Date(Date.now() - 3_600_000), new Date(Date.now() - 3_600_000));
        const o = l.owner;
        const expected = o === undefined ? false : o.host === hostname() ? o.pid === process.ppid : !old;
        expect(lockedElsewhere(conv)).toBe(expected);
      }),
      { numRuns: Number(process.env.FUZZ_RUNS ?? 200) },
    );
  });
});
