// Owed files, fuzzed: whatever text a conversation's folder holds under an owed file's name (of the
// names and marks each version made), listing the agent's owed files never throws, names each file
// it can't read in its faults or lists it with the host and token it names, and whether its process
// is gone is always told. A file that names another machine, however it spells it, is never taken
// for a gone process's while it is fresh: the answer it owes stays its own process's to deliver.
import { mkdirSync, mkdtempSync, readdirSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Event } from "../protocol/index.js";
import { appendEvent, listOwed, owedWriterGone, paths, type ConversationPaths } from "../store/index.js";

/** FC_SEED=N reruns a failure with the seed fast-check printed for it. */
const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
let tmp: string;
let dir: string;
let conv: ConversationPaths;

const question: Event = { v: 1, kind: "message", role: "user", time: "2026-12-05T03:00:00.000Z", header: "[h]", text: "q" };

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), "lnk-fuzz-owed-"));
  dir = join(tmp, "agent");
  mkdirSync(dir, { mode: 0o700 });
  conv = paths({ dir }).conversation("fuzzed");
  await appendEvent(conv, question);
});
afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** Removes every owed file of the conversation, so each run lists its own alone. */
function clear(): void {
  for (const name of readdirSync(conv.dir)) if (name.startsWith("owed-")) unlinkSync(join(conv.dir, name));
}

/** A name of each form: an earlier version's, its mark in the file; or its mark (and its message's tag) in the name, the file its holder's owner text. */
const owedName = fc.constantFrom(
  { name: `owed-${process.pid}-0123456789abcdef`, marked: false },
  { name: `owed-${process.pid}-0123456789abcdef-1`, marked: true },
  { name: `owed-${process.pid}-0123456789abcdef-1-abc123`, marked: true },
);
/** A host that is not this machine's, spelled any way (empty, spaces, a different case, control characters). */
const otherHost = fc.string({ maxLength: 300 }).filter((h) => h !== hostname());
/** Text an owed file may hold: anything, JSON of any shape, or a mark or owner text with fields of any value. */
const text = fc.oneof(
  fc.string({ maxLength: 200 }),
  fc.json(),
  fc.record({ v: fc.constant(1), after: fc.oneof(fc.nat(), fc.integer(), fc.double()), time: fc.string(), host: fc.option(fc.string(), { nil: undefined }), token: fc.option(fc.anything(), { nil: undefined }) }).map((o) => JSON.stringify(o)),
  fc.record({ pid: fc.integer(), host: fc.anything(), token: fc.anything(), folder: fc.string() }).map((o) => JSON.stringify(o)),
);

describe("owed files of any text", () => {
  it("are listed with what they name, or named as faults; whether their process is gone is always told", () => {
    fc.assert(
      fc.property(owedName, text, ({ name }, body) => {
        clear();
        writeFileSync(join(conv.dir, name), body, { mode: 0o600 });
        const { owed, faults } = listOwed({ dir });
        expect(owed.length + faults.length).toBe(1);
        for (const o of owed) {
          expect(o.name).toBe(name);
          if (o.writer.host !== undefined) expect(typeof o.writer.host).toBe("string");
          if (o.writer.token !== undefined) expect(typeof o.writer.token).toBe("string");
          expect(typeof owedWriterGone(o)).toBe("boolean");
        }
        // A fault names the file and never quotes more of it than a line.
        for (const f of faults) expect(f).not.toContain("\n");
      }),
      { numRuns: 300, ...seed },
    );
  });

  it("naming another machine, fresh, are never taken for a gone process's, whatever the host and token say", () => {
    fc.assert(
      fc.property(owedName, otherHost, fc.string({ maxLength: 100 }), ({ name, marked }, host, token) => {
        clear();
        const body = marked ? { pid: process.pid, host, token } : { v: 1, after: 1, time: new Date().toISOString(), host, token };
        writeFileSync(join(conv.dir, name), JSON.stringify(body), { mode: 0o600 });
        const { owed, faults } = listOwed({ dir });
        expect(faults).toEqual([]);
        expect(owed).toHaveLength(1);
        expect(owed[0]?.writer.host).toBe(host);
        expect(owedWriterGone(owed[0]!)).toBe(false);
      }),
      { numRuns: 200, ...seed },
    );
  });
});
