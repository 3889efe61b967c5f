// `_link/recover` answers with at most so much text: answers past it stay owed and come with the
// next call, which `more` says is due; each is handed over once all the same, a steered turn's
// answer once though two prompts owe it, and the first always goes however long it is.
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { recover } from "../acp/delivery.js";
import type { Event } from "../protocol/index.js";
import { appendEvent, paths, writeOwed } from "../store/index.js";
import { owedName } from "../store/owed.js";

const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
const folders: string[] = [];
afterEach(() => {
  for (const dir of folders.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const time = "2026-12-02T03:00:00.000Z";
const question = (text: string): Event => ({ v: 1, kind: "message", role: "user", time, header: "[h]", text });
const answer = (text: string): Event => ({ v: 1, kind: "message", role: "assistant", time, text, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" });

/** A conversation whose answer to its one question no client got: owed by `owing` prompts. */
async function owedAnswer(dir: string, thread: string, text: string, owing = 1): Promise<void> {
  const conv = paths({ dir }).conversation(thread);
  await appendEvent(conv, question(`q of ${thread}`));
  await appendEvent(conv, answer(text));
  for (let i = 0; i < owing; i++) writeOwed(conv, owedName((thread.charCodeAt(0) * 16 + i).toString(16).padStart(16, "0")), 0);
}

const owedFiles = (dir: string) => readdirSync(join(dir, "chats"), { recursive: true }).filter((n) => String(n).includes("owed-")).length;
/** A call, and its owed files' removal (once its answer is written) over before the next. */
async function call(dir: string, max: number) {
  const got = recover({ dir }, Promise.resolve(true), quiet, max);
  await new Promise((resolve) => setTimeout(resolve, 10));
  return { threads: got.answers.map((a) => a.sessionId), more: got.more };
}

describe("_link/recover's answer", () => {
  it("carries answers up to its bound, the rest owed for the next call, each once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lnk-recover-bound-"));
    folders.push(dir);
    await owedAnswer(dir, "a", "x".repeat(30));
    await owedAnswer(dir, "b", "y".repeat(30), 2);
    await owedAnswer(dir, "c", "z".repeat(100));
    expect(owedFiles(dir)).toBe(4);
    expect(await call(dir, 70)).toEqual({ threads: ["a", "b"], more: true });
    expect(owedFiles(dir)).toBe(1);
    // The first always goes, however long.
    expect(await call(dir, 70)).toEqual({ threads: ["c"], more: false });
    expect(await call(dir, 70)).toEqual({ threads: [], more: false });
    expect(owedFiles(dir)).toBe(0);
  });
});
