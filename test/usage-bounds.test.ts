// Usage numbers at and past their bounds, over the built daemon, its `usage` command and the scripted
// model: an answer's count or cost past what any provider reports is left out and named, and sums of
// the largest numbers an event may hold (answers written by hand) stay finite and whole, so every
// figure is a number (never null, never Infinity) and usage.json is still kept.
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { SessionUpdate } from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { AgentUsage, type AssistantMessage } from "../protocol/index.js";
import { eventName, paths, readEventsFrom, readUsageMark } from "../store/index.js";
import { ANSWER_COST_MAX, ANSWER_TOKENS_MAX } from "../turn/model.js";
import { configure, daemonTestHooks, scriptedSettings, stdioSession, tempDir } from "./acp-client.js";
import { BIN, MAIN } from "./fixtures/built.js";
import type { ModelServer } from "./model-server.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/usage.js", "dist/turn/usage.js", "dist/turn/model.js"], (s) => (server = s));

function usage(dir: string, json: boolean): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [MAIN, "usage", "--agent", dir, ...(json ? ["--json"] : [])], { encoding: "utf8", timeout: 30_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function usageJson(dir: string): AgentUsage {
  const r = usage(dir, true);
  expect(r.code, r.stderr).toBe(0);
  return AgentUsage.parse(JSON.parse(r.stdout));
}

const answers = (dir: string, thread: string): { n: number; answer: AssistantMessage }[] =>
  readEventsFrom(paths({ dir }).conversation(thread), 1).flatMap((e) => (e.event.kind === "message" && e.event.role === "assistant" ? [{ n: e.n, answer: e.event }] : []));

describe("usage numbers at and past their bounds", { timeout: 30_000 }, () => {
  it("past any provider's are left out of the answer; at the bound kept; the conversation's figures stay numbers", async () => {
    const dir = tempDir();
    cleanup.push(() => dir.remove());
    configure(dir.path, scriptedSettings(server.url));
    const { d, c, sessionId } = await stdioSession(dir.path, cleanup);
    const big = `{"prompt_tokens":${Number.MAX_SAFE_INTEGER},"completion_tokens":${ANSWER_TOKENS_MAX + 1},"cost":${Number.MAX_VALUE}}`;
    const atBound = `{"prompt_tokens":${ANSWER_TOKENS_MAX},"completion_tokens":${ANSWER_TOKENS_MAX},"cost":${ANSWER_COST_MAX}}`;
    server.script({ text: "One.", usageJson: big }, { text: "Two.", usageJson: atBound }, { text: "Three.", usageJson: atBound });
    for (const s of ["one", "two", "three"]) expect(await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: s }] })).toMatchObject({ stopReason: "end_turn" });
    const kept = answers(dir.path, sessionId).map((a) => a.answer);
    expect(kept[0]).toMatchObject({ usage: { in: 0, out: 0, cached: 0 }, left_out: [`prompt_tokens ${Number.MAX_SAFE_INTEGER}`, `completion_tokens ${ANSWER_TOKENS_MAX + 1}`, `cost ${Number.MAX_VALUE}`] });
    expect(kept[0]).not.toHaveProperty("cost");
    expect(kept.slice(1)).toEqual(Array.from({ length: 2 }, () => expect.objectContaining({ usage: { in: ANSWER_TOKENS_MAX, out: ANSWER_TOKENS_MAX, cached: 0 }, cost: ANSWER_COST_MAX })));
    const costs = c.updates.map((u) => u.update).flatMap((u: SessionUpdate) => (u.sessionUpdate === "usage_update" && u.cost ? [u.cost.amount] : []));
    expect(costs).toEqual([ANSWER_COST_MAX, 2 * ANSWER_COST_MAX]);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    const figures = usageJson(dir.path).total;
    expect(figures).toMatchObject({ tokens: { in: 2 * ANSWER_TOKENS_MAX, out: 2 * ANSWER_TOKENS_MAX, cached: 0 }, cost: 2 * ANSWER_COST_MAX });
  });

  it("sums of answers written by hand with the largest numbers an event holds stay whole and finite, and usage.json is kept", async () => {
    const dir = tempDir();
    cleanup.push(() => dir.remove());
    configure(dir.path, scriptedSettings(server.url));
    const { d, c, sessionId } = await stdioSession(dir.path, cleanup);
    server.script({ text: "One.", usage: { prompt_tokens: 10, completion_tokens: 2, cost: 0.5 } });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "one" }] });
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    const conv = paths({ dir: dir.path }).conversation(sessionId);
    const [first] = answers(dir.path, sessionId);
    if (!first) throw new Error("no answer");
    const huge: AssistantMessage = { ...first.answer, usage: { in: Number.MAX_SAFE_INTEGER, out: Number.MAX_SAFE_INTEGER, cached: Number.MAX_SAFE_INTEGER }, cost: Number.MAX_VALUE, latency_ms: Number.MAX_VALUE };
    for (const n of [first.n + 1, first.n + 2]) writeFileSync(join(conv.dir, eventName(n)), JSON.stringify(huge));
    const figures = usageJson(dir.path).total;
    expect(figures.tokens).toEqual({ in: Number.MAX_SAFE_INTEGER, out: Number.MAX_SAFE_INTEGER, cached: Number.MAX_SAFE_INTEGER });
    expect(figures.cost).toBe(Number.MAX_VALUE);
    expect(figures.model_ms).toBe(Number.MAX_VALUE);
    // The count was kept through the last answer, to go on from.
    expect(readUsageMark(conv)?.through).toBe(first.n + 2);
    const table = usage(dir.path, false);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).not.toMatch(/Infinity|NaN|null/);
  });
});
