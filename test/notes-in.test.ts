// What the agent remembered, in: configure writes the settings' remembered notes into Link's blocks
// of memory/notes.md (the agent's own text kept byte for byte, none added twice, deleted ones taken
// out), a turn's notes section shows them, and state export leaves them out. Hostile notes refused
// with one line naming the field and nothing written; the blocks' text, fuzzed.
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { AspState, BLOCK_MARK, Note, notePathFault, splitNotes, withNotes } from "../protocol/index.js";
import { BIN } from "./fixtures/built.js";
import { cliAgents } from "./fixtures/cli-agents.js";

const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
const { root, folder, cli } = cliAgents("lnk-notes-in-", [BIN, "dist/daemon/commands.js", "dist/asp/export.js", "dist/protocol/notes.js"], ["daemon", "asp", "store", "protocol", "turn"]);
const model = { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1" };
const configure = (dir: string, remembered: unknown) => cli(["configure", "--agent", dir], JSON.stringify({ model, remembered }));

describe("remembered notes, in", { timeout: 60_000 }, () => {
  it("are written into Link's blocks of notes.md, shown in the notes section, never doubled, taken out when deleted, and left out of the export", async () => {
    const dir = folder();
    mkdirSync(join(dir, "memory"));
    const own = "The gate code is 4417.\n\nAna likes tea.";
    writeFileSync(join(dir, "memory", "notes.md"), own);
    const hermes = { path: "MEMORY.md", text: "Ana's cat is Tom.", source: "hermes" };
    const claw = { path: "memory/2026-01-02.md", text: "Met Bo in Lyon.\n", source: "openclaw" };
    let c = await configure(dir, [hermes, claw]);
    expect(c.code, c.stderr).toBe(0);
    const once = readFileSync(join(dir, "memory", "notes.md"), "utf8");
    expect(once.startsWith(own)).toBe(true);
    expect(splitNotes(once).own).toBe(`${own}\n`);
    expect(splitNotes(once).blocks.map((b) => [b.kind, b.source, b.path, b.text])).toEqual([
      ["note", "hermes", "MEMORY.md", "Ana's cat is Tom.\n"],
      ["note", "openclaw", "memory/2026-01-02.md", "Met Bo in Lyon.\n"],
    ]);

    // The notes section: the agent's own, then each under its source and path, once.
    const i = await cli(["instructions", "--agent", dir]);
    expect(i.code, i.stderr).toBe(0);
    const notes = i.stdout.slice(i.stdout.indexOf("--- notes:"));
    expect(notes).toContain("The gate code is 4417.\n\nAna likes tea.\n\n(hermes: MEMORY.md)\nAna's cat is Tom.\n\n(openclaw: memory/2026-01-02.md)\nMet Bo in Lyon.");
    expect(notes.split("Ana's cat is Tom.").length).toBe(2);
    expect(notes).not.toContain(BLOCK_MARK);

    // A second configure writes the same file; one without a note takes its block out, the agent's text kept.
    c = await configure(dir, [hermes, claw]);
    expect(c.code, c.stderr).toBe(0);
    expect(readFileSync(join(dir, "memory", "notes.md"), "utf8")).toBe(once);
    c = await configure(dir, [claw]);
    expect(c.code, c.stderr).toBe(0);
    const after = readFileSync(join(dir, "memory", "notes.md"), "utf8");
    expect(after).not.toContain("Tom");
    expect(splitNotes(after).own).toBe(`${own}\n`);
    expect(splitNotes(after).blocks).toHaveLength(1);

    // The export gives the agent's own text alone.
    const r = await cli(["state", "export", "--agent", dir]);
    expect(r.code, r.stderr).toBe(0);
    expect(AspState.parse(JSON.parse(r.stdout)).memory).toEqual([{ path: "memory/notes.md", text: `${own}\n`, source: "link" }]);

    // With none left, notes.md is the agent's own again; an agent with no notes gets no file.
    c = await configure(dir, []);
    expect(c.code, c.stderr).toBe(0);
    expect(readFileSync(join(dir, "memory", "notes.md"), "utf8")).toBe(`${own}\n`);
    const empty = folder();
    expect((await configure(empty, [])).code).toBe(0);
    expect(existsSync(join(empty, "memory", "notes.md"))).toBe(false);
  });

  it("a hostile note is refused with one line naming the field, and nothing is written", async () => {
    const dir = folder();
    const bad: [unknown, string][] = [
      [{ path: "../../etc/passwd", text: "x", source: "hermes" }, "remembered.0.path"],
      [{ path: "/etc/shadow", text: "x", source: "hermes" }, "remembered.0.path"],
      [{ path: "a\\b", text: "x", source: "hermes" }, "remembered.0.path"],
      [{ path: "a b", text: "x", source: "hermes" }, "remembered.0.path"],
      [{ path: "p".repeat(300), text: "x", source: "hermes" }, "remembered.0.path"],
      [{ path: "MEMORY.md", text: `x ${BLOCK_MARK}end -->`, source: "hermes" }, "remembered.0.text"],
      [{ path: "MEMORY.md", text: "x", source: "Her mes" }, "remembered.0.source"],
    ];
    for (const [note, field] of bad) {
      const c = await configure(dir, [note]);
      expect(c.code, JSON.stringify(note)).toBe(2);
      expect(c.stderr.trim().split("\n")).toHaveLength(1);
      expect(c.stderr).toContain(field);
      expect(existsSync(join(dir, "config.json"))).toBe(false);
      expect(existsSync(join(dir, "memory"))).toBe(false);
    }
    // notes.md that is a link is refused, and nothing written.
    mkdirSync(join(dir, "memory"));
    writeFileSync(join(root(), "elsewhere.md"), "theirs\n");
    symlinkSync(join(root(), "elsewhere.md"), join(dir, "memory", "notes.md"));
    const c = await configure(dir, [{ path: "MEMORY.md", text: "x", source: "hermes" }]);
    expect(c.code).toBe(2);
    expect(c.stderr).toMatch(/^lnk-link-harness: cannot write what the agent remembered: .*\n$/);
    expect(readFileSync(join(root(), "elsewhere.md"), "utf8")).toBe("theirs\n");
    expect(existsSync(join(dir, "config.json"))).toBe(false);
  });
});

describe("notes' blocks, fuzzed", () => {
  const word = fc.stringMatching(/^[a-z0-9][a-z0-9._-]{0,8}$/);
  const path = fc.oneof(
    fc.array(word, { minLength: 1, maxLength: 3 }).map((p) => p.join("/")),
    fc.constantFrom("../x", "/abs", "a/../b", "a//b", ".", "a\\b", "a\u0000b", "a b", "x/./y"),
    fc.string({ maxLength: 20 }),
  );
  const text = fc.oneof(fc.string({ maxLength: 40 }), fc.constantFrom("<!-- link:end -->\n", "<!-- link:begin note a b -->\n", "\n\n"));

  it("an accepted path never leaves the folder; the agent's own text survives any notes, and a second write changes nothing", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 60 }), fc.array(fc.record({ path, text, source: word }), { maxLength: 4 }), (own, notes) => {
        const ok = notes.filter((n) => Note.safeParse(n).success);
        for (const n of ok) {
          expect(notePathFault(n.path)).toBeUndefined();
          expect(n.path.startsWith("/") || n.path.split("/").includes("..")).toBe(false);
          expect(join("/m", n.path).startsWith("/m/")).toBe(true);
        }
        // The agent's own text, where it holds no marker of Link's, is kept as it is (a newline added at most).
        if (own.includes(BLOCK_MARK)) return;
        const made = withNotes(own, "note", ok);
        expect(withNotes(made, "note", ok)).toBe(made);
        const split = splitNotes(made);
        expect([own, `${own}\n`]).toContain(split.own);
        expect(split.blocks.map((b) => [b.source, b.path, b.text.trimEnd()])).toEqual(ok.map((n) => [n.source, n.path, n.text.trimEnd()]));
        expect(splitNotes(withNotes(made, "note", [])).own).toBe(split.own);
      }),
      { numRuns: 500, ...seed },
    );
  });
});
