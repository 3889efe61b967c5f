// The bench's steady turns by their age: processes of more turns than a round's, each span of turn
// numbers told apart, the daemon's beside the pass-through's.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ageSpans, measureClient } from "./bench/client.js";
import { startModelServer, type ModelServer } from "./model-server.js";

let server: ModelServer;
beforeAll(async () => {
  server = await startModelServer();
});
afterAll(async () => {
  await server.close();
});

describe("the turns' age", () => {
  it("tells apart the rounds' own turns, a span a third of the way on, and the last, each as wide", () => {
    expect(ageSpans(300, 20)).toEqual([
      { from: 2, to: 20 },
      { from: 101, to: 119 },
      { from: 282, to: 300 },
    ]);
    expect(ageSpans(100, 10)).toEqual([
      { from: 2, to: 10 },
      { from: 34, to: 42 },
      { from: 92, to: 100 },
    ]);
    // No room for a span that is not the rounds' own, or that would overlap the one before it.
    expect(ageSpans(25, 20)).toEqual([{ from: 2, to: 20 }]);
    expect(ageSpans(70, 20)).toEqual([
      { from: 2, to: 20 },
      { from: 24, to: 42 },
      { from: 52, to: 70 },
    ]);
    // The last span only past the one before it.
    expect(ageSpans(50, 20)).toEqual([
      { from: 2, to: 20 },
      { from: 32, to: 50 },
    ]);
  });

  it("runs processes of each for as many turns as asked, and takes each span's turns from each of them", async () => {
    const said: string[] = [];
    const asked = server.requests.length;
    const result = await measureClient(server, { turns: 3, rounds: 1, starts: 1, ageing: { processes: 2, turns: 10 }, log: (line) => said.push(line) });
    const ageing = result.ageing;
    expect(ageing?.processes).toBe(2);
    expect(ageing?.turns).toBe(10);
    // Turns 2-3, 4-5 (a third of the way on) and 9-10, of two processes each.
    expect(ageing?.spans.map((s) => [s.from, s.to])).toEqual([
      [2, 3],
      [4, 5],
      [9, 10],
    ]);
    for (const span of ageing?.spans ?? []) {
      for (const s of [span.daemon, span.passThrough]) {
        expect(s.n).toBe(4);
        expect(s.median).toBeGreaterThan(0);
      }
      // Against the floor the rounds measured: their durable write and the span's own pass-through.
      expect(span.ratio).toBeCloseTo(span.daemon.median / (result.durableWrite.median + span.passThrough.median), 10);
    }
    expect(said).toContain("client: 2 processes of each, 10 turns each, by the turns' age");
    // The first processes that count for nothing and the round (3 turns each, both), the ageing's
    // (10 each, both, two of each), and the spawn's first prompt.
    expect(server.requests.slice(asked).filter((r) => r.path.endsWith("/chat/completions"))).toHaveLength(2 * 3 + 2 * 3 + 4 * 10 + 1);
  });
});
