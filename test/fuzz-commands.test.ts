// Chat commands, fuzzed from what a person could type: /model:set with a URL that holds a user and a
// password, in any form a URL takes, is refused without repeating the password, writing nothing; any
// command padded with whitespace is kept as a bounded text; an unknown command's name is repeated
// with what can't be shown as escapes, never half a pair.
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseCommand, runCommand, setConversationModel, type CommandContext } from "../turn/commands.js";

/** FC_SEED=N reruns a failure with the seed fast-check printed for it. */
const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
let dir: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "lnk-fuzz-commands-"));
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A context of an agent with no settings; what `--agent` sets is kept in `agentSet`. */
function context(agentSet: (string | undefined)[]): CommandContext {
  return {
    agent: { dir },
    thread: "fuzz",
    settings: undefined,
    time: new Date("2026-12-04T00:00:00.000Z"),
    stop: () => false,
    agentModel: { get: () => undefined, set: (m) => void agentSet.push(m) },
    status: () => Promise.resolve([]),
  };
}

const password = fc.stringMatching(/^[A-Za-z0-9._~!$&'()*+,;=%-]{4,24}$/).map((p) => `pw${p}`);
/** A URL that holds a user and `password`, or a user:password@host alone. */
const withCredentials = fc.tuple(fc.webUrl({ withQueryParameters: true, withFragments: true }), fc.stringMatching(/^[a-z0-9]{1,10}$/), password, fc.boolean()).map(([url, user, pw, bare]) => {
  const u = new URL(url);
  const typed = bare ? `${user}:${pw}@${u.host}${u.pathname}` : `${u.protocol}//${user}:${pw}@${u.host}${u.pathname}${u.search}`;
  return { typed, pw };
});

describe("/model:set, fuzzed", () => {
  it("refuses a URL with a user and a password, or user:password@host, without repeating the password and writing nothing", async () => {
    await fc.assert(
      fc.asyncProperty(withCredentials, fc.boolean(), async ({ typed, pw }, agentWide) => {
        const set: (string | undefined)[] = [];
        const parsed = parseCommand(`/model:set ${agentWide ? "--agent " : ""}${typed}`, undefined);
        expect(parsed?.kind).toBe("command");
        if (parsed === undefined) return;
        const outcome = await runCommand(context(set), parsed);
        expect(outcome.refused).toBe(true);
        expect(outcome.reply).not.toContain(pw);
        expect(set).toEqual([]);
        expect(readdirSync(dir)).toEqual([]);
      }),
      { numRuns: 300, ...seed },
    );
  });
});

describe("/model:set with a character no name holds, fuzzed", () => {
  /**
   * A format character (bidirectional controls, zero-width ones among them), half of a UTF-16 pair, or
   * U+FFFD. Not U+FEFF: trimmed as a space is, it leaves a name at either end.
   */
  const unshown = fc.oneof(
    fc.constantFrom("\u202a", "\u202e", "\u2066", "\u2069", "\u200b", "\u200d", "\u200e", "\u061c", "\u00ad", "\u2060", "\ufffd"),
    fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
  );
  const name = fc.stringMatching(/^[a-z0-9][a-z0-9._:-]{0,40}$/);

  it("is refused, here and as the model option, writing nothing, and the reply shows it only as an escape", async () => {
    await fc.assert(
      fc.asyncProperty(name, unshown, fc.nat(), fc.constantFrom("command", "command --agent", "option"), async (word, c, at, how) => {
        const model = `${word.slice(0, at % (word.length + 1))}${c}${word.slice(at % (word.length + 1))}`;
        const set: (string | undefined)[] = [];
        const ctx = context(set);
        let outcome;
        if (how === "option") outcome = await setConversationModel(ctx, model, "");
        else {
          const parsed = parseCommand(`/model:set ${how === "command --agent" ? "--agent " : ""}${model}`, undefined);
          if (parsed === undefined) throw new Error("not a command");
          outcome = await runCommand(ctx, parsed);
        }
        expect(outcome.refused).toBe(true);
        expect(outcome.reply).toMatch(/is not a model's name/);
        expect(outcome.reply).not.toMatch(/[\p{Cf}\p{Cs}]/u);
        expect(set).toEqual([]);
        expect(readdirSync(dir)).toEqual([]);
      }),
      { numRuns: 300, ...seed },
    );
  });
});

describe("a command padded with whitespace, fuzzed", () => {
  const space = fc.string({ unit: fc.constantFrom(" ", "\t", "\n", "\r", "\u00a0", "\u3000"), maxLength: 2000 });
  const word = fc.constantFrom("model:set", "chat:create", "verbosity:set", "new", "skill:weather", "Model", "nope");
  const args = fc.string({ unit: fc.constantFrom("a", "-", " ", "\n", "é"), maxLength: 40 });

  it("is kept as its name and its arguments, one space between: never the padding", () => {
    fc.assert(
      fc.property(word, args, space, space, (name, a, gap, tail) => {
        const parsed = parseCommand(`/${name}${a.trim() ? ` ${gap}${a}` : ""}${tail}`, undefined);
        expect(parsed).toBeDefined();
        const trimmed = a.trim();
        expect(parsed?.typed).toBe(trimmed ? `/${name} ${trimmed}` : `/${name}`);
      }),
      { numRuns: 500, ...seed },
    );
  });
});

describe("an unknown command's name, fuzzed", () => {
  /** What a name may hold: letters, quotes and backslashes, controls, format characters, pairs and their lone halves; never a space or a slash. */
  const unit = fc.oneof(
    fc.constantFrom("a", "z", "-", ":", "\"", "\\", "é"),
    fc.integer({ min: 0, max: 0x9f }).filter((c) => !/[\s/]/.test(String.fromCharCode(c))).map((c) => String.fromCharCode(c)),
    fc.constantFrom("\u202a", "\u202e", "\u2066", "\u2069", "\u200b", "\u200d", "\u200e", "\u061c", "\u00ad", "\u2060", "\u{e0041}", "\u{1f600}", "\u{10ffff}"),
    fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
  );
  const name = fc.string({ unit, minLength: 1, maxLength: 90 }).filter((n) => /^[^\s/]/.test(n));

  /** The name as the reply shows it, its escapes read back: `\u{…}` as the character, the rest as JSON. */
  function readBack(shown: string): string {
    if (!shown.startsWith('"')) return shown;
    const json = shown.replace(/(?<!\\)((?:\\\\)*)\\u\{([0-9a-f]+)\}/g, (_, slashes: string, hex: string) => slashes + JSON.stringify(String.fromCodePoint(parseInt(hex, 16))).slice(1, -1));
    const back: unknown = JSON.parse(json);
    if (typeof back !== "string") throw new Error(`not a string: ${shown}`);
    return back;
  }

  it("is repeated showable, well-formed and bounded: what it shows reads back as the start of what was typed, never half a pair", async () => {
    await fc.assert(
      fc.asyncProperty(name, async (n) => {
        const parsed = parseCommand(`/${n}`, undefined);
        fc.pre(parsed?.kind === "unknown");
        if (parsed === undefined) return;
        const outcome = await runCommand(context([]), parsed);
        expect(outcome.refused).toBe(true);
        expect(outcome.reply).not.toMatch(/[\p{Cc}\p{Cf}\p{Cs}]/u);
        expect(outcome.reply.isWellFormed()).toBe(true);
        const shown = / is not a command/.exec(outcome.reply);
        if (!shown) throw new Error(`no refusal: ${outcome.reply}`);
        const typed = `/${parsed.name}`;
        const back = readBack(outcome.reply.slice(0, shown.index));
        expect(typed.startsWith(back)).toBe(true);
        // All of it, or its first 65 code units less a pair's first half the cut would part.
        if (back.length < typed.length) {
          expect(back.length === 65 || (back.length === 64 && typed.charCodeAt(64) >= 0xd800 && typed.charCodeAt(64) <= 0xdbff)).toBe(true);
        }
        expect(readdirSync(dir)).toEqual([]);
      }),
      { numRuns: 500, ...seed },
    );
  });
});
