// `_link/recover` answers with at most so much text: answers past it stay owed and come with the
// next call, which `more` says is due; each is handed over once all the same, a steered turn's
// answer once though two prompts owe it, and the first always goes however long it is.
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
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
const answer = (text: string, stop: "end_turn" | "tool_calls" | "cancelled" = "end_turn"): Event => ({ v: 1, kind: "message", role: "assistant", time, text, model: "m", provider: "p", latency_ms: 1, stop });

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

/** What a turn may write after its message: answers that call tools, their results, another writer's model chosen. */
const midTurn = fc.array(
  fc.oneof(
    fc.constant<Event>(answer("calling", "tool_calls")),
    fc.constant<Event>({ v: 1, kind: "tool_result", time, call_id: "c", tool: "t__c", text: "r", error: false }),
    fc.constant<Event>({ v: 1, kind: "command", time, name: "/model:set", model: "another" }),
  ),
  { maxLength: 4 },
);

describe("_link/recover after a process killed mid-turn", () => {
  it("never hands over the answer of the turn after the killed one, which its own prompt was answered with", async () => {
    await fc.assert(
      fc.asyncProperty(midTurn, fc.boolean(), midTurn, fc.constantFrom<"end_turn" | "cancelled">("end_turn", "cancelled"), async (first, finished, second, end) => {
        const dir = mkdtempSync(join(tmpdir(), "lnk-recover-killed-"));
        folders.push(dir);
        const conv = paths({ dir }).conversation("t");
        // The killed turn's prompt, owed after event 0, and what its turn wrote; it ends only when `finished`.
        await appendEvent(conv, question("the killed turn's"));
        for (const e of first) await appendEvent(conv, e);
        const own = finished ? await appendEvent(conv, answer("its own answer")) : undefined;
        writeOwed(conv, owedName("00000000000000a1"), 0);
        // The next turn, in another process: its prompt's answer reached its client.
        const next = await appendEvent(conv, question("the next turn's"));
        for (const e of second) await appendEvent(conv, e);
        await appendEvent(conv, answer("the next turn's answer", end));
        const got = recover({ dir }, Promise.resolve(true), quiet);
        expect(got.answers.map((a) => a.event)).toEqual(own !== undefined ? [own] : []);
        expect(got.answers.every((a) => a.event < next)).toBe(true);
      }),
      { numRuns: Number(process.env.FUZZ_RUNS ?? 60) },
    );
  });
});
