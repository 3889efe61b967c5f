// A load that follows a running turn (Turns.follow): what the turn shows each follower from where
// its load stood, whatever the turn is doing as the load begins.
import type { AgentContext, SessionUpdate } from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { CallNames } from "../acp/call-names.js";
import { Outbox } from "../acp/outbox.js";
import { shownAfter, Turns, type StartTurn, type Subscriber } from "../acp/turns.js";
import type { Event } from "../protocol/index.js";
import type { SteerQueue, TurnListener, TurnOutcome } from "../turn/types.js";
import { deferred } from "./fixtures/deferred.js";

const t = "2026-01-01T00:00:00.000Z";
const through = { dir: "/chat" } as never;
const user = (text: string): Event => ({ v: 1, kind: "message", role: "user", time: t, text, header: "" });
const answer = (text: string, calls?: { id: string; name: string; arguments: string }[]): Event =>
  ({ v: 1, kind: "message", role: "assistant", time: t, text, model: "m", provider: "p", latency_ms: 1, stop: calls ? "tool_calls" : "end_turn", ...(calls ? { tool_calls: calls } : {}) }) as Event;
const result = (id: string): Event => ({ v: 1, kind: "tool_result", time: t, call_id: id, tool: "x__y", text: "ok", error: false });
const done: TurnOutcome = { stop: "end_turn", modelMs: 0 };
const call = [{ id: "c1", name: "x__y", arguments: "{}" }];

/** A subscriber that keeps what it is sent, in a few words each (as a connection whose loads are over is shown it: Outbox). */
function subscriber(): Subscriber & { view(): string[] } {
  const got: SessionUpdate[] = [];
  return {
    send: (u, heldFor) => void (shownAfter(heldFor) && got.push(u)),
    view: () =>
      got.map((u) => {
        if (u.sessionUpdate === "agent_message_chunk" || u.sessionUpdate === "user_message_chunk") return `${u.sessionUpdate === "user_message_chunk" ? "user" : "agent"}: ${(u.content as { text: string }).text}`;
        if (u.sessionUpdate === "tool_call" || u.sessionUpdate === "tool_call_update") return `${u.sessionUpdate} ${u.toolCallId}: ${u.status ?? ""}`;
        return u.sessionUpdate;
      }),
  };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 10));

/** A turn that reports what `before` does, stops until `open` is called, then reports what `after` does. */
function pausing(before: (l: TurnListener) => void, after: (l: TurnListener) => void = () => undefined) {
  const paused = deferred();
  const gate = deferred();
  const start: StartTurn = async (_m, _s, _signal, l: TurnListener) => {
    before(l);
    paused.resolve();
    await gate.promise;
    after(l);
    return done;
  };
  return { start, paused: paused.promise, open: () => gate.resolve() };
}

/** Prompts `turn` under `key` for `sub` and waits until it stops: its answer, to come. */
async function begin(turns: Turns, turn: ReturnType<typeof pausing>, sub: Subscriber, key = "/chat"): Promise<{ answered: Promise<TurnOutcome> }> {
  const answered = turns.prompt(key, { text: "q" }, "all", turn.start, sub, undefined, async () => new CallNames());
  await turn.paused;
  return { answered };
}

/** A turn that writes its message (event 1), stops, then answers `text` (event 2). */
const answering = (text: string) =>
  pausing(
    (l) => {
      l({ type: "asked", after: 0, through });
      l({ type: "event", n: 1, event: user("q") });
    },
    (l) => l({ type: "event", n: 2, event: answer(text) }),
  );

/** A subscriber whose every send throws, as one did whose walk of its loads overflowed the stack. */
const broken: Subscriber = {
  send: () => {
    throw new RangeError("Maximum call stack size exceeded");
  },
};

/** The conversation's next turn runs, and is answered. */
async function nextTurnRuns(turns: Turns): Promise<void> {
  const next = answering("Again.");
  const again = await begin(turns, next, subscriber());
  next.open();
  expect(await again.answered).toEqual(done);
}

describe("a load that follows a running turn", () => {
  it("is shown nothing its load showed when a message steers the turn while its calls wait for their names", async () => {
    const names = deferred<CallNames>();
    const paused = deferred();
    const gate = deferred();
    const start: StartTurn = async (_m, _s, _signal, l: TurnListener) => {
      l({ type: "asked", after: 0, through });
      l({ type: "event", n: 1, event: user("q") });
      l({ type: "text", delta: "Let me." });
      l({ type: "event", n: 2, event: answer("Let me.", call) });
      // Held from here until the conversation's call names are read.
      l({ type: "tool_call", id: "c1", name: "x__y", arguments: {} });
      l({ type: "event", n: 3, event: result("c1") });
      l({ type: "tool_result", id: "c1", name: "x__y", status: "completed", text: "ok" });
      l({ type: "text", delta: "Done." });
      l({ type: "event", n: 4, event: answer("Done.") });
      // A message that steers it, written.
      l({ type: "event", n: 5, event: user("and more") });
      l({ type: "asked", after: 4, through });
      paused.resolve();
      await gate.promise;
      return done;
    };
    const turns = new Turns();
    const answered = turns.prompt("/chat", { text: "q" }, "all", start, subscriber(), undefined, () => names.promise);
    await paused.promise;
    const follower = subscriber();
    const following = turns.follow("/chat", undefined, follower, () => 99);
    names.resolve(new CallNames());
    await settle();
    gate.resolve();
    await answered;
    // Its load shows up to the answer that made the call (in progress): the turn shows it the rest, once.
    expect(following?.upTo).toBe(2);
    expect(follower.view()).toEqual(["tool_call_update c1: completed", "agent: Done.", "user: and more"]);
  });

  it("still skips what its load showed once it steers the turn itself, and is not shown its own message again", async () => {
    const names = deferred<CallNames>();
    const paused = deferred();
    const gate = deferred();
    const steered = deferred();
    const start: StartTurn = async (_m, steering, _signal, l: TurnListener) => {
      l({ type: "asked", after: 0, through });
      l({ type: "event", n: 1, event: user("q") });
      l({ type: "event", n: 2, event: answer("Let me.", call) });
      l({ type: "tool_call", id: "c1", name: "x__y", arguments: {} });
      paused.resolve();
      await gate.promise;
      l({ type: "event", n: 3, event: result("c1") });
      l({ type: "tool_result", id: "c1", name: "x__y", status: "completed", text: "ok" });
      await steered.promise;
      for (const m of steering.take()) l({ type: "event", n: 4, event: user(m.text) });
      l({ type: "asked", after: 3, through });
      l({ type: "event", n: 5, event: answer("Done.") });
      return done;
    };
    const turns = new Turns();
    const answered = turns.prompt("/chat", { text: "q" }, "all", start, subscriber(), undefined, () => names.promise);
    await paused.promise;
    const follower = subscriber();
    const following = turns.follow("/chat", undefined, follower, () => 99);
    // The follower's client sends a message of its own: it steers the turn.
    const steering = turns.prompt("/chat", { text: "also this" }, "all", start, follower);
    steered.resolve();
    names.resolve(new CallNames());
    await settle();
    gate.resolve();
    await Promise.all([answered, steering]);
    expect(following?.upTo).toBe(2);
    expect(follower.view()).toEqual(["tool_call_update c1: completed", "agent: Done."]);
  });

  it("is shown the turn's message before the text the model streamed while it was written", async () => {
    const turn = pausing(
      (l) => {
        l({ type: "asked", after: 2, through });
        // The model answers while the message is still being flushed.
        l({ type: "text", delta: "Hel" });
      },
      (l) => {
        l({ type: "text", delta: "l" });
        l({ type: "event", n: 3, event: user("q") });
        l({ type: "text", delta: "o." });
        l({ type: "event", n: 4, event: answer("Hello.") });
      },
    );
    const turns = new Turns();
    const prompter = subscriber();
    const { answered } = await begin(turns, turn, prompter);
    const follower = subscriber();
    const following = turns.follow("/chat", undefined, follower, () => 99);
    turn.open();
    await answered;
    expect(following?.upTo).toBe(2);
    expect(follower.view()).toEqual(["user: q", "agent: Hell", "agent: o."]);
    // The prompter was shown the text as it came, and not its own message.
    expect(prompter.view()).toEqual(["agent: Hel", "agent: l", "agent: o."]);
  });

  it("follows the turn of a conversation the chat's session writes as its current one, and stops when its load failed", async () => {
    const turn = answering("Found.");
    const turns = new Turns();
    // A session naming the conversation (`<thread>~main`) prompts it; the chat's own session loads.
    const { answered } = await begin(turns, turn, subscriber(), "/chat\u0000main");
    const follower = subscriber();
    const failed = subscriber();
    expect(turns.follow("/chat", undefined, follower, () => 99)?.upTo).toBe(1);
    turns.follow("/chat", undefined, failed, () => 99)?.stop();
    // Another conversation's session follows nothing of it.
    const other = subscriber();
    turns.follow("/chat", "other", other, () => 99);
    turn.open();
    await answered;
    expect(other.view()).toEqual([]);
    expect(follower.view()).toEqual(["agent: Found."]);
    expect(failed.view()).toEqual([]);
  });
});

describe("the connection that prompted a turn, loading its session while the turn runs", () => {
  it("is shown its own message when its load stood before the turn wrote it: the load shows the conversation anew", async () => {
    const turn = pausing(
      (l) => l({ type: "asked", after: 2, through }),
      (l) => {
        l({ type: "event", n: 3, event: user("q") });
        l({ type: "text", delta: "Hi." });
        l({ type: "event", n: 4, event: answer("Hi.") });
      },
    );
    const turns = new Turns();
    const prompter = subscriber();
    const { answered } = await begin(turns, turn, prompter);
    // Its own load, while the turn's message is still being written.
    expect(turns.follow("/chat", undefined, prompter, () => 99)?.upTo).toBe(2);
    turn.open();
    await answered;
    expect(prompter.view()).toEqual(["user: q", "agent: Hi."]);
  });
});

describe("a load that follows, with several connections sending messages", () => {
  it("is shown the messages others send after its own: only its own is not shown it again", async () => {
    const paused = deferred();
    const gate = deferred();
    const start: StartTurn = async (_m, steering, _signal, l: TurnListener) => {
      l({ type: "asked", after: 0, through });
      l({ type: "event", n: 1, event: user("q") });
      paused.resolve();
      await gate.promise;
      let n = 1;
      for (const m of steering.take()) {
        l({ type: "event", n: ++n, event: user(m.text) });
        l({ type: "asked", after: n - 1, through });
      }
      l({ type: "event", n: n + 1, event: answer("Done.") });
      return done;
    };
    const turns = new Turns();
    const prompter = subscriber();
    const answered = turns.prompt("/chat", { text: "q" }, "all", start, prompter, undefined, async () => new CallNames());
    await paused.promise;
    const follower = subscriber();
    turns.follow("/chat", undefined, follower, () => 99);
    // The follower's client steers the turn, then the first prompter's does too.
    const mine = turns.prompt("/chat", { text: "mine" }, "all", start, follower);
    const theirs = turns.prompt("/chat", { text: "theirs" }, "all", start, prompter);
    gate.resolve();
    await Promise.all([answered, mine, theirs]);
    expect(follower.view()).toEqual(["user: theirs", "agent: Done."]);
  });

  it("follows too the turn of the chat's own session that waits for the lock a session naming its conversation holds", async () => {
    const namedPaused = deferred();
    const namedGate = deferred();
    const lock = deferred();
    const named: StartTurn = async (_m, _s, _signal, l: TurnListener) => {
      l({ type: "asked", after: 0, through });
      l({ type: "event", n: 1, event: user("q") });
      namedPaused.resolve();
      await namedGate.promise;
      l({ type: "event", n: 2, event: answer("One.") });
      lock.resolve();
      return done;
    };
    const own: StartTurn = async (_m, _s, _signal, l: TurnListener) => {
      // Waits for the chat's lock.
      await lock.promise;
      l({ type: "asked", after: 2, through });
      l({ type: "event", n: 3, event: user("second") });
      l({ type: "event", n: 4, event: answer("Two.") });
      return done;
    };
    const turns = new Turns();
    const first = turns.prompt("/chat\u0000main", { text: "q" }, "all", named, subscriber(), undefined, async () => new CallNames());
    await namedPaused.promise;
    const second = turns.prompt("/chat", { text: "second" }, "all", own, subscriber(), undefined, async () => new CallNames());
    await settle();
    const follower = subscriber();
    const failed = subscriber();
    expect(turns.follow("/chat", undefined, follower, () => 1)?.upTo).toBe(1);
    turns.follow("/chat", undefined, failed, () => 1)?.stop();
    namedGate.resolve();
    await Promise.all([first, second]);
    expect(follower.view()).toEqual(["agent: One.", "user: second", "agent: Two."]);
    expect(failed.view()).toEqual([]);
  });

  it("a second load that failed leaves the connection following as its first load had it", async () => {
    const turn = answering("Done.");
    const turns = new Turns();
    const { answered } = await begin(turns, turn, subscriber());
    const follower = subscriber();
    turns.follow("/chat", undefined, follower, () => 99);
    turns.follow("/chat", undefined, follower, () => 99)?.stop();
    turn.open();
    await answered;
    expect(follower.view()).toEqual(["agent: Done."]);
  });

  it("a connection that loads the session tens of thousands of times while the turn runs is shown its answer once, and the next turn runs", async () => {
    const turn = answering("Done.");
    const turns = new Turns();
    const { answered } = await begin(turns, turn, subscriber());
    const follower = subscriber();
    for (let i = 0; i < 50_000; i++) turns.follow("/chat", undefined, follower, () => 99).loaded();
    turn.open();
    expect(await answered).toEqual(done);
    expect(follower.view()).toEqual(["agent: Done."]);
    await nextTurnRuns(turns);
  });

  it("a subscriber that throws as it is sent an update fails neither the turn nor the conversation's next", async () => {
    const errors: unknown[] = [];
    const turns = new Turns((_key, e) => errors.push(e));
    const turn = answering("Done.");
    const { answered } = await begin(turns, turn, broken);
    turn.open();
    expect(await answered).toEqual(done);
    expect(errors.length).toBeGreaterThan(0);
    await nextTurnRuns(turns);
  });

  it("a run whose own last steps fail (its call left unanswered, shown to a subscriber that throws) answers its messages with the failure, and frees the conversation", async () => {
    const errors: unknown[] = [];
    const turns = new Turns((_key, e) => errors.push(e));
    const turn = pausing((l) => {
      l({ type: "asked", after: 0, through });
      l({ type: "event", n: 1, event: user("q") });
      l({ type: "tool_call", id: "c1", name: "x__y", arguments: {} });
    });
    const answered = turns.prompt("/chat", { text: "q" }, "all", turn.start, broken);
    await turn.paused;
    turn.open();
    await expect(answered).rejects.toThrow(/could not go on: Maximum call stack/);
    expect(turns.count).toBe(0);
    await nextTurnRuns(turns);
  });
});

describe("a load under way when a turn of its conversation begins", () => {
  it("follows that turn from its start until the load is over; one that begins after is not followed", async () => {
    const turns = new Turns();
    const loading = subscriber();
    const following = turns.follow("/chat", undefined, loading, () => 0);
    // No turn runs: the load shows all it reads, until one begins.
    expect(following.upTo).toBe(Number.POSITIVE_INFINITY);
    const first = answering("One.");
    const { answered } = await begin(turns, first, subscriber());
    // Then what was there as it began: the turn shows the rest.
    expect(following.upTo).toBe(0);
    first.open();
    await answered;
    following.loaded();
    const second = answering("Two.");
    const next = await begin(turns, second, subscriber());
    second.open();
    await next.answered;
    expect(loading.view()).toEqual(["user: q", "agent: One."]);
  });
});

describe("a load of the chat's session under way when a session naming its conversation begins writing it", () => {
  it("follows that session's turn once it writes, whether it began during the load or waited for the lock as it began", async () => {
    for (const before of [false, true]) {
      const turns = new Turns();
      const turn = pausing(() => undefined, (l) => {
        l({ type: "asked", after: 0, through });
        l({ type: "event", n: 1, event: user("q") });
        l({ type: "event", n: 2, event: answer("One.") });
      });
      // Waiting for the chat's lock as the load begins, or prompted during it.
      const early = before ? await begin(turns, turn, subscriber(), "/chat\u0000main") : undefined;
      const loading = subscriber();
      const following = turns.follow("/chat", undefined, loading, () => 0);
      const { answered } = early ?? (await begin(turns, turn, subscriber(), "/chat\u0000main"));
      turn.open();
      await answered;
      following.loaded();
      expect({ before, upTo: following.upTo, view: loading.view() }).toEqual({ before, upTo: 0, view: ["user: q", "agent: One."] });
    }
  });
});

describe("two loads of one connection at once", () => {
  it("the first failing leaves the second following", async () => {
    const turns = new Turns();
    const connection = subscriber();
    const first = turns.follow("/chat", undefined, connection, () => 0);
    const second = turns.follow("/chat", undefined, connection, () => 0);
    const turn = answering("One.");
    const { answered } = await begin(turns, turn, subscriber());
    first.stop();
    second.loaded();
    turn.open();
    await answered;
    expect(connection.view()).toEqual(["user: q", "agent: One."]);
  });
});

describe("a load of a session naming a conversation the chat's own session writes", () => {
  it("follows the chat's own turn while it writes that conversation, whether it wrote it as the load began or began during it", async () => {
    for (const before of [true, false]) {
      const turns = new Turns();
      const turn = pausing(
        (l) => {
          if (!before) return;
          l({ type: "asked", after: 0, through, conversation: "main" });
          l({ type: "event", n: 1, event: user("q") });
        },
        (l) => {
          if (!before) {
            l({ type: "asked", after: 0, through, conversation: "main" });
            l({ type: "event", n: 1, event: user("q") });
          }
          l({ type: "event", n: 2, event: answer("One.") });
        },
      );
      const { answered } = await begin(turns, turn, subscriber());
      const named = subscriber();
      const other = subscriber();
      const following = turns.follow("/chat", "main", named, () => 0);
      turns.follow("/chat", "other", other, () => 0);
      turn.open();
      await answered;
      following.loaded();
      expect({ before, upTo: following.upTo, named: named.view(), other: other.view() }).toEqual({ before, upTo: before ? 1 : 0, named: before ? ["agent: One."] : ["user: q", "agent: One."], other: [] });
    }
  });
});

describe("what a load held back, once it failed", () => {
  /** A connection's outbox, and what it sent its client: the kind of each update, with its text; text chunks one after another joined. */
  function connection() {
    const got: SessionUpdate[] = [];
    const client = { notify: async (_method: string, params: { update: SessionUpdate }) => void got.push(params.update) } as unknown as AgentContext;
    const outbox = new Outbox();
    const view = async () => {
      await outbox.flushed();
      const seen: string[] = [];
      for (const u of got) {
        const text = (u as { content?: { text?: string } }).content?.text;
        const kind = u.sessionUpdate === "agent_message_chunk" ? "agent" : u.sessionUpdate === "user_message_chunk" ? "user" : u.sessionUpdate;
        if (kind === "agent" && seen.at(-1)?.startsWith("agent: ")) seen[seen.length - 1] += text ?? "";
        else seen.push(text === undefined ? kind : `${kind}: ${text}`);
      }
      return seen.join(" | ");
    };
    return { outbox, sub: outbox.subscriber(client, "s"), hold: () => outbox.hold(client, "s"), view };
  }

  it("is not shown; what a load before it that still follows the turn is owed, is", async () => {
    const turn = pausing(
      (l) => {
        l({ type: "asked", after: 0, through });
        l({ type: "event", n: 1, event: user("q") });
        l({ type: "text", delta: "Hel" });
      },
      (l) => {
        l({ type: "text", delta: "lo." });
        l({ type: "event", n: 2, event: answer("Hello.") });
      },
    );
    const turns = new Turns();
    const { answered } = await begin(turns, turn, subscriber());
    // Loaded once: shown what the turn streamed so far, and following it.
    const c = connection();
    const first = c.hold();
    turns.follow("/chat", undefined, c.sub, () => 99).loaded();
    first();
    // Loaded again: that load fails while the turn goes on.
    const second = c.hold();
    const failing = turns.follow("/chat", undefined, c.sub, () => 99);
    turn.open();
    await answered;
    failing.stop();
    second();
    // Its own showing of what was streamed is left out; the rest of the turn, owed to the first load, is not.
    expect(await c.view()).toBe("agent: Hello.");
    // A connection whose only load failed is shown nothing of it.
    const other = pausing((l) => {
      l({ type: "asked", after: 0, through });
      l({ type: "event", n: 1, event: user("q") });
      l({ type: "text", delta: "Hel" });
    }, (l) => l({ type: "text", delta: "lo." }));
    const d = connection();
    const next = await begin(turns, other, subscriber());
    const only = d.hold();
    const load = turns.follow("/chat", undefined, d.sub, () => 99);
    other.open();
    await next.answered;
    load.stop();
    only();
    expect(await d.view()).toBe("");
  });

  it("of two loads of a connection at once that both failed, is not shown, nor anything of the turn after them", async () => {
    const turn = answering("Hello.");
    const turns = new Turns();
    const { answered } = await begin(turns, turn, subscriber());
    const c = connection();
    const firstHeld = c.hold();
    const first = turns.follow("/chat", undefined, c.sub, () => 1);
    const secondHeld = c.hold();
    const second = turns.follow("/chat", undefined, c.sub, () => 1);
    first.stop();
    firstHeld();
    second.stop();
    secondHeld();
    turn.open();
    await answered;
    expect(await c.view()).toBe("");
  });

  /** A step of a turn: what it reports (and takes of the messages that steer it). */
  type Step = (l: TurnListener, steering: SteerQueue) => void;

  /** A turn that asks, streams "Hel", writes its message, streams "lo." and answers "Hello.". */
  const hello: Step[] = [
    (l) => l({ type: "asked", after: 0, through }),
    (l) => l({ type: "text", delta: "Hel" }),
    (l) => l({ type: "event", n: 1, event: user("q") }),
    (l) => l({ type: "text", delta: "lo." }),
    (l) => l({ type: "event", n: 2, event: answer("Hello.") }),
  ];

  /** A turn of `c`'s own whose steps run one after another, each once `upTo` lets it. */
  function own(c: ReturnType<typeof connection>, steps: Step[] = hello) {
    const gates = steps.map(() => deferred());
    const start: StartTurn = async (_m, steering, _signal, l: TurnListener) => {
      for (const [i, step] of steps.entries()) {
        await gates[i]?.promise;
        step(l, steering);
      }
      return done;
    };
    const turns = new Turns();
    const answered = [turns.prompt("/chat", { text: "q" }, "all", start, c.sub, undefined, async () => new CallNames())];
    let ran = 0;
    /** Runs the turn's steps up to and including `step` (0: the first). */
    const upTo = async (step: number) => {
      for (; ran <= step; ran++) gates[ran]?.resolve();
      await new Promise((resolve) => setImmediate(resolve));
    };
    /** A message `c` sends the turn: it steers it. */
    const steer = (text: string) => answered.push(turns.prompt("/chat", { text }, "all", start, c.sub));
    /** A load of `c` that stands at `at`: held back, and following. */
    const load = (at: number) => ({ release: c.hold(), following: turns.follow("/chat", undefined, c.sub, () => at) });
    return { turns, answered: () => Promise.all(answered), upTo, steer, load, last: steps.length - 1 };
  }

  it("leaves the connection that prompted the turn shown it once, as it streamed, whichever step its load began and failed at", async () => {
    // [the last step run as the load began, the last as it failed]: before the message, across it, after it.
    for (const [began, failed] of [[0, 1], [1, 1], [0, 2], [1, 2], [2, 3], [0, 4]] as const) {
      const c = connection();
      const { answered, upTo, load, last } = own(c);
      await upTo(began);
      const { release, following } = load(0);
      await upTo(failed);
      following.stop();
      release();
      await upTo(last);
      await answered();
      expect({ began, failed, view: await c.view() }).toEqual({ began, failed, view: "agent: Hello." });
    }
  });

  it("leaves the connection that prompted the turn shown the call its load would have shown itself", async () => {
    const c = connection();
    const { answered, upTo, load, last } = own(c, [
      (l) => l({ type: "asked", after: 0, through }),
      (l) => l({ type: "event", n: 1, event: user("q") }),
      (l) => l({ type: "event", n: 2, event: answer("Let me.", call) }),
      (l) => l({ type: "tool_call", id: "c1", name: "x__y", arguments: {} }),
      (l) => l({ type: "event", n: 3, event: result("c1") }),
      (l) => l({ type: "tool_result", id: "c1", name: "x__y", status: "completed", text: "ok" }),
    ]);
    // Loaded as the call's answer was written, before the call was shown: the load would show it (in progress).
    await upTo(2);
    const { release, following } = load(2);
    await upTo(3);
    following.stop();
    release();
    await upTo(last);
    await answered();
    expect(await c.view()).toBe("agent: Let me. | tool_call | tool_call_update");
  });

  it("does not show the connection its own message that steered the turn, when a second load of it fails", async () => {
    const c = connection();
    const { answered, upTo, load, steer, last } = own(c, [
      (l) => l({ type: "asked", after: 0, through }),
      (l) => l({ type: "event", n: 1, event: user("q") }),
      (l) => l({ type: "event", n: 2, event: answer("Hi.") }),
      (l, steering) => {
        for (const m of steering.take()) l({ type: "event", n: 3, event: user(m.text) });
        l({ type: "asked", after: 2, through });
      },
      (l) => l({ type: "event", n: 4, event: answer("Ok.") }),
    ]);
    await upTo(2);
    const first = load(2);
    first.following.loaded();
    first.release(true);
    // It steers after its first load; its second, begun after, fails as the turn writes that message.
    steer("more");
    const second = load(2);
    await upTo(3);
    second.following.stop();
    second.release();
    await upTo(last);
    await answered();
    expect(await c.view()).toBe("agent: Hi.Ok.");
  });

  it("leaves the connection that prompted the turn shown it once, as it streamed, when two loads of it at once both fail", async () => {
    for (const failed of [1, 2, 3]) {
      const c = connection();
      const { answered, upTo, load, last } = own(c);
      await upTo(0);
      const first = load(0);
      const second = load(0);
      await upTo(failed);
      first.following.stop();
      first.release();
      second.following.stop();
      second.release();
      await upTo(last);
      await answered();
      expect({ failed, view: await c.view() }).toEqual({ failed, view: "agent: Hello." });
    }
  });

  it("shows a connection that steered the turn during its load, which failed, the turn from its message on, as it would have been without the load", async () => {
    const c = connection();
    const turns = new Turns();
    const steps: ((l: TurnListener, steering: SteerQueue) => void)[] = [
      (l) => l({ type: "asked", after: 0, through }),
      (l) => l({ type: "event", n: 1, event: user("q") }),
      (l) => l({ type: "text", delta: "Hel" }),
      (l, steering) => {
        for (const m of steering.take()) l({ type: "event", n: 2, event: user(m.text) });
        l({ type: "asked", after: 1, through });
        l({ type: "text", delta: "lo." });
      },
      (l) => l({ type: "event", n: 3, event: answer("Hello.") }),
    ];
    const gates = steps.map(() => deferred());
    const start: StartTurn = async (_m, steering, _signal, l) => {
      for (const [i, step] of steps.entries()) {
        await gates[i]?.promise;
        step(l, steering);
      }
      return done;
    };
    // Another connection prompts; this one loads, and steers while it loads.
    const answered = turns.prompt("/chat", { text: "q" }, "all", start, subscriber(), undefined, async () => new CallNames());
    gates[0]?.resolve();
    gates[1]?.resolve();
    await new Promise((resolve) => setImmediate(resolve));
    const release = c.hold();
    const following = turns.follow("/chat", undefined, c.sub, () => 1);
    gates[2]?.resolve();
    await new Promise((resolve) => setImmediate(resolve));
    const steered = turns.prompt("/chat", { text: "more" }, "all", start, c.sub);
    gates[3]?.resolve();
    await new Promise((resolve) => setImmediate(resolve));
    following.stop();
    release();
    gates[4]?.resolve();
    await Promise.all([answered, steered]);
    // Without the load: nothing before its message, then what the turn streamed.
    expect(await c.view()).toBe("agent: lo.");
  });

  it("shows the connection that prompted the turn the text held back from it once, when the turn ends before its message is written and its load fails after", async () => {
    const c = connection();
    const { answered, upTo, load } = own(c, [(l) => l({ type: "asked", after: 0, through }), (l) => l({ type: "text", delta: "Hel" })]);
    await upTo(0);
    const { release, following } = load(0);
    await upTo(1);
    await answered();
    following.stop();
    release();
    expect(await c.view()).toBe("agent: Hel");
  });

  it("shows the connection the turn once when, of two loads of it at once, one fails and the other shows the session whole", async () => {
    for (const firstFails of [true, false]) {
      const c = connection();
      const { answered, upTo, load, last } = own(c);
      await upTo(0);
      const first = load(0);
      await upTo(3);
      const second = load(1);
      // The one that shows the session whole shows all the turn showed before it began.
      if (firstFails) {
        first.following.stop();
        first.release();
        second.following.loaded();
        second.release(true);
      } else {
        second.following.stop();
        second.release();
        first.following.loaded();
        first.release(true);
      }
      await upTo(last);
      await answered();
      // The first load, begun before the turn's message was written, shows it; the second began after.
      expect({ firstFails, view: await c.view() }).toEqual({ firstFails, view: firstFails ? "agent: Hello." : "user: q | agent: Hello." });
    }
  });

  it("shows the connection that prompted the turn the text held back from it as it followed, when the turn ends before its message is written", async () => {
    const c = connection();
    const turns = new Turns();
    const asked = deferred();
    const gate = deferred();
    const answered = turns.prompt(
      "/chat",
      { text: "q" },
      "all",
      async (_m, _s, _signal, l) => {
        l({ type: "asked", after: 0, through });
        asked.resolve();
        await gate.promise;
        l({ type: "text", delta: "Hel" });
        return done;
      },
      c.sub,
      undefined,
      async () => new CallNames(),
    );
    await asked.promise;
    const held = c.hold();
    turns.follow("/chat", undefined, c.sub, () => 0).loaded();
    held();
    gate.resolve();
    await answered;
    expect(await c.view()).toBe("agent: Hel");
  });
});
