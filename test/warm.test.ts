// A blank process's warm-up: its prompts are served as the bound agent's connection will be (the
// front, Node's web streams over a pair of Node streams, the lines bounded), so that code has run
// before a Bind; and its garbage is collected once it is done, not in the bound agent's first turn.
import type { Readable, Writable } from "node:stream";
import { setImmediate as tick } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { startAgent } from "../daemon/agent.js";
import { DEFAULT_UNREAD_MS } from "../daemon/front.js";
import { DEFAULT_MAX_BYTES, serveStreams, type Target } from "../daemon/serve.js";
import { collectGarbage, warmPrompts } from "../daemon/warm.js";
import { forgetRuntimeAnswers } from "../turn/runtime.js";
import { forgetProcessState } from "../turn/turn.js";

/** What the agent's side wrote: an answer has an id, a prompt's its stop reason. */
const Message = z.looseObject({ id: z.unknown().optional(), result: z.looseObject({ stopReason: z.string().optional() }).optional() });

describe("a blank process's warm-up", () => {
  it("runs its prompts through the front, over Node's streams, as stdio is served", async () => {
    const served: { lines: string[] }[] = [];
    const serve = (input: Readable, output: Writable, target: Target) => {
      const seen = { lines: [] as string[] };
      served.push(seen);
      let rest = "";
      output.on("data", (chunk: Buffer) => {
        const lines = (rest + chunk.toString("utf8")).split("\n");
        rest = lines.pop() ?? "";
        seen.lines.push(...lines);
      });
      return serveStreams(input, output, target, "test", { max: DEFAULT_MAX_BYTES, unreadMs: DEFAULT_UNREAD_MS });
    };
    const warmed = await warmPrompts(startAgent, { state: forgetProcessState, answers: forgetRuntimeAnswers }, { prompts: 5, serve, connections: 2 });
    expect(warmed.prompts).toBe(5);
    // Two connections, each through the front: its answers to initialize, session/new and its share of the prompts.
    expect(served).toHaveLength(2);
    const answers = served.map((s) => s.lines.map((l) => Message.parse(JSON.parse(l))).filter((m) => m.id !== undefined));
    expect(answers.map((a) => a.map((m) => m.id))).toEqual([
      [0, 1, 2, 3, 4],
      [0, 1, 2, 3],
    ]);
    expect(answers.flatMap((a) => a.slice(2).map((m) => m.result?.stopReason))).toEqual(["end_turn", "end_turn", "end_turn", "end_turn", "end_turn"]);
  });

  it("stops before the next prompt once a Bind came, on whichever connection it is", async () => {
    // Asked after each prompt but a connection's last, and before each connection but the first:
    // the fifth time, as the second connection would begin, a Bind has come.
    let asked = 0;
    const enough = () => ++asked > 4;
    const warmed = await warmPrompts(startAgent, { state: forgetProcessState, answers: forgetRuntimeAnswers }, { prompts: 40, connections: 8, enough });
    expect(warmed.prompts).toBe(5);
  });

  it("forgets no runtime's answer once a Bind came while a later connection opened", async () => {
    let bound = false;
    let forgotten = 0;
    let connections = 0;
    const serve = (input: Readable, output: Writable, target: Target) => {
      // The second connection is made after the last look at `enough`: the Bind comes now.
      if (++connections === 2) bound = true;
      return serveStreams(input, output, target, "test", { max: DEFAULT_MAX_BYTES, unreadMs: DEFAULT_UNREAD_MS });
    };
    const answers = () => {
      forgotten++;
      forgetRuntimeAnswers();
    };
    const forget = { state: forgetProcessState, answers };
    const warmed = await warmPrompts(startAgent, forget, { prompts: 40, connections: 8, serve, enough: () => bound });
    // The first connection's five prompts, the answers forgotten before each but the first; none after.
    expect(warmed.prompts).toBe(5);
    expect(forgotten).toBe(4);
  });

  it("collects its garbage at once when done", async () => {
    let kept: object | undefined = { garbage: "x".repeat(1024) };
    const ref = new WeakRef(kept);
    kept = undefined;
    // A target looked at in the current job is kept until it ends.
    await tick();
    collectGarbage();
    await tick();
    expect(kept).toBeUndefined();
    expect(ref.deref()).toBeUndefined();
  });
});
