// The client part's stamped pass: each process's own time told from the time between the processes,
// from stamps taken at its stdio and sockets (bench/stamps.ts) and the times the client and the proxy noted.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { measureClient } from "./bench/client.js";
import { Stamps, turnsInside, type SeenTurn } from "./bench/inside.js";
import { beginsResponse, STAMP_KINDS, type Stamp } from "./bench/stamps.js";
import { insideLines } from "./bench/table.js";
import { startModelServer, type ModelServer } from "./model-server.js";

let server: ModelServer;
beforeAll(async () => {
  server = await startModelServer();
});
afterAll(async () => {
  await server.close();
});

describe("a turn told apart", () => {
  // Two turns 100 ms apart, each: sent at +0, read at +0.1, its request written at +1.0 and at the
  // proxy at +1.2, the model's chunks read at +2.0 and +2.3, its last byte out of the proxy at +2.2,
  // the response written at +3.0 and in the client's hands at +3.4.
  const at = (base: number): { seen: SeenTurn; stamps: Stamp[] } => ({
    seen: { sent: base, asked: base + 1.2, answered: base + 2.2, done: base + 3.4 },
    stamps: [
      ["in", base + 0.1],
      ["request", base + 1.0],
      ["answer", base + 2.0],
      ["answer", base + 2.3],
      ["response", base + 3.0],
    ],
  });

  it("takes the process's own part from its stamps, and the ways to it and from it from the client's and the proxy's", () => {
    const a = at(1000);
    const b = at(1100);
    const turns = turnsInside([a.seen, b.seen], [...a.stamps, ...b.stamps]);
    expect(turns).toHaveLength(2);
    for (const t of turns) {
      // 1.2 ms before the model in all: 0.1 to the process, 0.9 its own, 0.2 to the proxy.
      expect(t.promptRead).toBeCloseTo(0.1);
      expect(t.before).toBeCloseTo(0.9);
      expect(t.requestTaken).toBeCloseTo(0.2);
      // 1.2 ms after its last byte: read 0.1 after it left the proxy, 0.7 its own, 0.4 to the client.
      expect(t.answerRead).toBeCloseTo(0.1);
      expect(t.after).toBeCloseTo(0.7);
      expect(t.responseTaken).toBeCloseTo(0.4);
    }
  });

  it("leaves out a turn whose stamps are missing, and never takes the next turn's for it", () => {
    const a = at(1000);
    const b = at(1100);
    // The first turn's response was never stamped: the second's is no stand-in for it.
    const stamps = [...a.stamps.filter(([k]) => k !== "response"), ...b.stamps];
    const turns = turnsInside([a.seen, b.seen], stamps);
    expect(turns).toHaveLength(1);
    expect(turns[0]?.after).toBeCloseTo(0.7);
    expect(turnsInside([a.seen], [])).toEqual([]);
  });

  it("takes any stamps a process wrote, in any order, and tells apart only turns they fit, never a part below nothing but the answer's way", () => {
    const kind = fc.constantFrom<Stamp[0]>(...STAMP_KINDS);
    const time = fc.double({ min: 0, max: 50, noNaN: true });
    const seen = fc.tuple(time, time, time, time).map(([a, b, c, d]): SeenTurn => {
      const [sent, asked, answered, done] = [a, b, c, d].sort((x, y) => x - y) as [number, number, number, number];
      return { sent, asked, answered, done };
    });
    fc.assert(
      fc.property(fc.array(seen, { maxLength: 6 }), fc.array(fc.tuple(kind, time), { maxLength: 40 }), (turns, stamps) => {
        const told = turnsInside(turns, stamps);
        expect(told.length).toBeLessThanOrEqual(turns.length);
        for (const t of told) {
          for (const part of [t.promptRead, t.before, t.requestTaken, t.after, t.responseTaken]) expect(part).toBeGreaterThanOrEqual(0);
          expect(Number.isFinite(t.answerRead)).toBe(true);
        }
      }),
    );
  });

  it("reads a stamps file only as stamps: anything else a process could leave there is refused", () => {
    expect(Stamps.safeParse([["in", 1.5], ["response", 2]]).success).toBe(true);
    for (const bad of [{}, null, "[]", [["in"]], [["in", "1"]], [["out", 1]], [["in", 1, 2]], [[1, "in"]]]) expect(Stamps.safeParse(bad).success).toBe(false);
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const read = Stamps.safeParse(value);
        if (read.success) for (const [k, t] of read.data) expect(STAMP_KINDS.includes(k) && typeof t === "number").toBe(true);
      }),
    );
  });

  it("tells a response on the output from a notification or a request of the process's own", () => {
    expect(beginsResponse('{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}\n')).toBe(true);
    expect(beginsResponse(Buffer.from('{"jsonrpc":"2.0","id":"a\\"b","error":{"code":-32602}}\n'))).toBe(true);
    expect(beginsResponse('{"jsonrpc":"2.0","method":"session/update","params":{}}\n')).toBe(false);
    expect(beginsResponse('{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{}}\n')).toBe(false);
    expect(beginsResponse("")).toBe(false);
    // Whatever a process writes, in any shape a stream takes it, is looked at without a throw.
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.uint8Array(), fc.constant(undefined), fc.integer()), (chunk) => {
        expect(typeof beginsResponse(chunk)).toBe("boolean");
      }),
    );
  });
});

describe("the stamped pass", () => {
  it("stamps real processes of each, the daemon and the pass-through, and says where their time went", async () => {
    const said: string[] = [];
    const result = await measureClient(server, { turns: 3, rounds: 1, starts: 1, stamped: 1, log: (line) => said.push(line) });
    const inside = result.inside;
    expect(inside?.processes).toBe(1);
    for (const split of [inside?.daemon, inside?.passThrough]) {
      // Turns 2 and 3 of the stamped process, each told apart.
      expect(split?.before.n).toBe(2);
      for (const s of [split?.before, split?.after]) expect(s?.median).toBeGreaterThan(0);
      // The prompt's, the request's and the response's ways each lie between two stamps of two
      // processes in the order they happened (each note taken after what it notes), so none is below
      // nothing by more than how far the processes' clocks may stand apart. The answer's last byte
      // is noted by the proxy in a callback after it left, which a busy machine delays by more than
      // a millisecond: that way alone may be well below nothing.
      for (const s of [split?.promptRead, split?.requestTaken, split?.responseTaken]) expect(s?.min).toBeGreaterThan(-0.1);
      expect(Number.isFinite(split?.answerRead.median)).toBe(true);
    }
    expect(said).toContain("client: 1 stamped processes of each, their own time told from the ways to and from them");
    const lines = insideLines(inside!);
    const n = String.raw`-?\d+\.\d+`;
    expect(lines[1]).toMatch(new RegExp(`^ {4}daemon {6}: before the model ${n} \\+ ${n} \\+ ${n} ms, after its last byte ${n} \\+ ${n} \\+ ${n} ms \\(medians of 2 turns\\)$`));
  });
});
