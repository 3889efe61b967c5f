// The bench's paired rounds (`--against`): this build's daemon and another's, each round a fresh
// process of each, against the same model behind the same proxy.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { againstSummary, measureAgainst, type AgainstResult } from "./bench/client.js";
import { againstLine } from "./bench/table.js";
import { MAIN } from "./fixtures/built.js";
import { startModelServer, type ModelServer } from "./model-server.js";

let server: ModelServer;
beforeAll(async () => {
  server = await startModelServer();
});
afterAll(async () => {
  await server.close();
});

describe("paired rounds of two builds' daemons", () => {
  it("runs both, round after round, and keeps each round's medians of each", async () => {
    const said: string[] = [];
    const asked = server.requests.length;
    const result = await measureAgainst(server, MAIN, { turns: 3, rounds: 2, log: (line) => said.push(line) });
    expect(result.other).toBe(MAIN);
    expect(result.rounds).toHaveLength(2);
    for (const round of result.rounds) {
      for (const split of [round.here, round.there]) {
        for (const v of [split.before, split.after, split.overhead]) expect(v).toBeGreaterThan(0);
        expect(split.overhead).toBeGreaterThan(split.before);
      }
    }
    // Six processes of three turns each: a first of each build that counts for nothing, then two rounds of both.
    expect(server.requests.slice(asked).filter((r) => r.path.endsWith("/chat/completions"))).toHaveLength(18);
    expect(said).toEqual([`client: 2 paired rounds of 3 turns, this build's daemon and ${MAIN}`]);
  });

  it("says each build's overhead and, round by round, by how much this one's was lower", () => {
    const split = (overhead: number) => ({ before: overhead / 2, after: overhead / 2, overhead });
    const against: AgainstResult = {
      other: "/elsewhere/dist/daemon/lnk-link-harness.cjs",
      turns: 20,
      rounds: [
        { here: split(2.0), there: split(2.5) },
        { here: split(3.0), there: split(2.9) },
        { here: split(2.2), there: split(2.6) },
      ],
    };
    const summary = againstSummary(against);
    expect(summary.here).toBeCloseTo(2.2);
    expect(summary.there).toBeCloseTo(2.6);
    // The differences: -0.5, +0.1, -0.4; their median, and two of three rounds lower here.
    expect(summary.difference).toBeCloseTo(-0.4);
    expect(summary.lowerHere).toBe(2);
    const line = againstLine(against);
    expect(line).toContain("against /elsewhere/dist/daemon/lnk-link-harness.cjs, 3 paired rounds of turns 2-20: overhead 2.20 ms here, 2.60 ms there");
    expect(line).toContain("here less there, per round: median -0.40 ms, lower here in 2 of 3");
  });
});
