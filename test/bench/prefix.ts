// The prompt-cache prefix: over a long conversation that crosses several drop points, how much of
// each request's prompt (its messages, serialised as sent) starts byte for byte as the previous one's.
// A provider's prompt cache reuses exactly that share.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeSettings } from "../../store/index.js";
import { runTurn } from "../../turn/turn.js";
import type { ModelServer, RecordedRequest } from "../model-server.js";
import { answerText, pairTokens, questionText, settingsForBudget, windowOverhead } from "./agent.js";

export interface PrefixResult {
  turns: number;
  /** The window's budget, in user messages and answers. */
  windowPairs: number;
  /** Requests whose window started later than the previous one's (the first message after the system prompt changed). */
  drops: number;
  /** The share of each request's bytes that repeats the previous request's start, averaged. */
  mean: number;
  min: number;
  /** The same average over the requests between drops. */
  meanBetweenDrops: number;
}

function commonPrefix(a: Buffer, b: Buffer): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

function messagesOf(request: RecordedRequest): unknown[] {
  return request.body.messages ?? [];
}

export async function measurePrefix(server: ModelServer, turns: number, windowPairs: number): Promise<PrefixResult> {
  const dir = mkdtempSync(join(tmpdir(), "lnk-link-harness-bench-prefix-"));
  try {
    const agent = { dir };
    const overhead = await windowOverhead(agent, server.url);
    writeSettings(agent, settingsForBudget(server.url, windowPairs * pairTokens(), overhead));
    let answers = 0;
    server.fallback = () => ({ text: answerText(answers++) });
    server.requests.length = 0;
    for (let i = 0; i < turns; i++) {
      const outcome = await runTurn({ agent, thread: "long", message: { text: questionText(i) } }, () => undefined);
      if (outcome.failure) throw new Error(`turn ${i} failed: ${outcome.failure.message}`);
    }
    const requests = server.requests.filter((r) => r.path === "/v1/chat/completions");
    server.requests.length = 0;
    const shares: number[] = [];
    const between: number[] = [];
    let drops = 0;
    for (let i = 1; i < requests.length; i++) {
      const before = messagesOf(requests[i - 1] as RecordedRequest);
      const now = messagesOf(requests[i] as RecordedRequest);
      const a = Buffer.from(JSON.stringify(before));
      const b = Buffer.from(JSON.stringify(now));
      const share = commonPrefix(a, b) / b.length;
      shares.push(share);
      if (JSON.stringify(before[1]) !== JSON.stringify(now[1])) drops++;
      else between.push(share);
    }
    const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / Math.max(1, xs.length);
    return { turns: requests.length, windowPairs, drops, mean: mean(shares), min: Math.min(...shares), meanBetweenDrops: mean(between) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
