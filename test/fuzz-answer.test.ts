// A tool's answer, fuzzed: any mix of text, images and resource links, up to thousands of links.
// The client is shown at most LINKS_MAX links of it, the first ones; the model's text names the same
// ones and counts the rest as left out.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { answerText, LINKS_MAX, mediaOf } from "../daemon/tools/session.js";

/** FC_SEED=N reruns a failure with the seed fast-check printed for it. */
const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};

type Item = CallToolResult["content"][number];
const item: fc.Arbitrary<Item> = fc.oneof(
  fc.record({ type: fc.constant("text" as const), text: fc.stringMatching(/^[a-z \n]{0,20}$/) }),
  fc.record({ type: fc.constant("image" as const), data: fc.constantFrom("iVBORw0KGgo=", ""), mimeType: fc.constant("image/png") }),
  fc.record({ type: fc.constant("resource_link" as const), uri: fc.webUrl(), name: fc.string({ maxLength: 10 }) }),
);
/** Content with a run of links of any length, up to thousands, somewhere among the rest. */
const content = fc
  .tuple(fc.array(item, { maxLength: 10 }), fc.integer({ min: 0, max: 3 * LINKS_MAX }), fc.array(item, { maxLength: 10 }))
  .map(([before, n, after]) => [...before, ...Array.from({ length: n }, (_, i): Item => ({ type: "resource_link", uri: `file:///l/${i}`, name: `l${i}` })), ...after]);

describe("a tool's answer, fuzzed", () => {
  it("shows the client its first links up to the bound, names the same in its text and counts the rest", () => {
    fc.assert(
      fc.property(content, (items) => {
        const result: CallToolResult = { content: items };
        const links = items.filter((i) => i.type === "resource_link");
        const shown = mediaOf(result).filter((m) => m.type === "resource_link");
        expect(shown.map((m) => m.uri)).toEqual(links.slice(0, LINKS_MAX).map((l) => l.uri));
        const text = answerText(result);
        expect(text.split("\n").filter((l) => l.startsWith("[resource_link ")).length).toBe(Math.min(links.length, LINKS_MAX));
        if (links.length > LINKS_MAX) expect(text).toContain(`[${links.length - LINKS_MAX} more resource links left out: an answer shows at most ${LINKS_MAX}]`);
        else expect(text).not.toContain("more resource links left out");
      }),
      { numRuns: 300, ...seed },
    );
  });
});
