// The rough count: four ASCII characters a token, one for any other character (a surrogate pair is
// one character). The quick path for ASCII text must count as the rule does, whatever the text.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { roughTokens } from "../turn/window.js";

const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};

/** The rule, character by character. */
function byRule(text: string): number {
  let ascii = 0;
  let other = 0;
  for (const ch of text) {
    if (ch.length === 1 && ch.charCodeAt(0) < 0x80) ascii++;
    else other++;
  }
  return Math.ceil(ascii / 4) + other;
}

describe("the rough count", () => {
  it("counts any text as the rule does", () => {
    const unit = fc.oneof(fc.constantFrom("a", " ", "\n", "\u0000", "\u007f", "é", "日", "😀", "\ud800", "\udc00"), fc.string({ maxLength: 3 }));
    fc.assert(
      fc.property(fc.array(unit, { maxLength: 60 }).map((parts) => parts.join("")), (text) => {
        expect(roughTokens(text)).toBe(byRule(text));
      }),
      { numRuns: 2_000, ...seed },
    );
  });

  it("counts ASCII text a token each four characters, rounded up", () => {
    expect(roughTokens("")).toBe(0);
    expect(roughTokens("abcd")).toBe(1);
    expect(roughTokens("abcde")).toBe(2);
    expect(roughTokens("é")).toBe(1);
    expect(roughTokens("abcdé😀")).toBe(3);
  });
});
