// A chat's conversations read back from its log (turn/chat.ts): a fork's events are its source's up to
// the fork point, then its own, however long the chain of forks of forks; the same, fuzzed, as the
// rule says it, conversation by conversation, also where only some of the events are kept.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Event, Numbered } from "../protocol/index.js";
import { ChatLog, chatMap, conversationEvents, type ChatMap } from "../turn/chat.js";

const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
const time = "2026-12-02T00:00:00.000Z";
const said = (text: string): Event => ({ v: 1, time, kind: "message", role: "user", text, header: "[h]" });
const forked = (conversation: string, thread: string, event: number): Event => ({ v: 1, time, kind: "command", name: "/chat:fork", conversation, thread, event });

/** The rule, by recursion: a fork's source's events up to the fork point (a source begun before it), then its own. */
function byRule(map: ChatMap, name: string): Numbered[] {
  const conv = map.conversations.get(name);
  if (!conv) return [];
  const own = map.own.get(name) ?? [];
  const source = conv.source === undefined ? undefined : map.conversations.get(conv.source);
  if (!source || conv.at === undefined || source.begin >= conv.begin) return own.slice();
  const at = Math.min(conv.at, conv.begin);
  return [...byRule(map, source.name).filter((e) => e.n <= at), ...own];
}

describe("a chat's forks", () => {
  it("a chain of 20,000 forks of forks is read back whole, each sharing all before it", () => {
    const events: Numbered[] = [{ n: 1, event: said("root") }];
    let current = "main";
    for (let i = 1; i <= 20_000; i++) {
      const n = events.length + 1;
      events.push({ n, event: forked(`fork-${n}`, current, n - 1) });
      current = `fork-${n}`;
      events.push({ n: n + 1, event: said(`in ${current}`) });
    }
    const got = conversationEvents(chatMap(events), current);
    expect(got).toHaveLength(events.length);
    expect(got.map((e) => e.n)).toEqual(events.map((e) => e.n));
  });

  it("any log of messages, forks and resumes reads each conversation as the rule says", () => {
    const step = fc.oneof(
      fc.record({ kind: fc.constant("say" as const) }),
      fc.record({ kind: fc.constant("fork" as const), source: fc.nat({ max: 6 }), back: fc.nat({ max: 8 }) }),
      fc.record({ kind: fc.constant("resume" as const), to: fc.nat({ max: 6 }) }),
    );
    fc.assert(
      fc.property(fc.array(step, { maxLength: 60 }), (steps) => {
        const events: Numbered[] = [];
        const names = ["main"];
        for (const s of steps) {
          const n = events.length + 1;
          if (s.kind === "say") events.push({ n, event: said(`m${n}`) });
          else if (s.kind === "fork") {
            events.push({ n, event: forked(`fork-${n}`, names[s.source % names.length] as string, Math.max(1, n - 1 - s.back)) });
            names.push(`fork-${n}`);
          } else events.push({ n, event: { v: 1, time, kind: "command", name: "/chat:resume", conversation: names[s.to % names.length] as string } });
        }
        const map = chatMap(events);
        for (const name of map.conversations.keys()) expect(conversationEvents(map, name).map((e) => e.n), name).toEqual(byRule(map, name).map((e) => e.n));
        // A log that keeps only some of the events (a chat's choosing commands, say) gives each conversation those of its own.
        const kept = (e: Numbered) => e.n % 3 === 0;
        const some = new ChatLog<Numbered>((e) => (kept(e) ? e : undefined));
        for (const e of events) some.see(e);
        for (const name of map.conversations.keys()) expect(conversationEvents(some, name).map((e) => e.n), name).toEqual(conversationEvents(map, name).filter(kept).map((e) => e.n));
      }),
      { numRuns: 1_000, ...seed },
    );
  });
});
