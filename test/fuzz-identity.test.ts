// Link's identity block, fuzzed: an owner's instruction.md of any text (marker look-alikes, CRs,
// no newline at its end) and any identity texts. Writing the block keeps the owner's text byte for
// byte, writing it again replaces it (one block, never two), and taking it out gives the file back.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Identity, outsideBlock, splitBlock, withBlock } from "../protocol/index.js";

const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};

/** Pieces an owner's file may hold, markers' look-alikes among them; never a whole block of Link's. */
const piece = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.constantFrom("\n", "\r\n", "## Who you are\n", "<!-- link:begin -->\n", "<!-- link:end -->\n", " <!-- link:begin x -->", "<!-- link:", "<!-- link:begi"),
);
const ownerText = fc.array(piece, { maxLength: 12 }).map((p) => p.join("")).filter((t) => splitBlock(t).block === undefined);

/** Identity texts as configure takes them (a text holding a marker is refused before it gets here). */
const text = fc.string({ maxLength: 30 }).filter((t) => Identity.shape.persona.safeParse(t).success);
const identity = fc.record({ persona: text, owner: text, standing: text }, { requiredKeys: [] });

describe("the identity block, fuzzed", () => {
  it("keeps the owner's text byte for byte, replaces itself, and comes out again", () => {
    fc.assert(
      fc.property(ownerText, identity, identity, (own, a, b) => {
        const once = withBlock(own, a);
        expect(outsideBlock(once)).toBe(own);
        const twice = withBlock(once, b);
        expect(twice).toBe(withBlock(own, b));
        expect(outsideBlock(twice)).toBe(own);
        expect(withBlock(twice, {})).toBe(own);
        const split = splitBlock(twice);
        // One block at most: what is outside it holds none.
        expect(splitBlock(split.before + split.after).block).toBeUndefined();
      }),
      { numRuns: 2000, ...seed },
    );
  });

  it("a text holding a marker is refused by the settings' schema, naming the field", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 10 }), fc.string({ maxLength: 10 }), fc.constantFrom("persona", "owner", "standing"), (a, b, key) => {
        const parsed = Identity.safeParse({ [key]: `${a}<!-- link:${b}` });
        expect(parsed.success).toBe(false);
        expect(parsed.error?.issues[0]?.path).toEqual([key]);
      }),
      { numRuns: 300, ...seed },
    );
  });
});
