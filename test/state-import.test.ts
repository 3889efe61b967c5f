// `state import` over the built command line: an ASP State's texts written where the agent's file is
// missing or empty, its skills added where the agent has none of that name, its notes kept (its own
// by their paths, another harness's in Link's blocks), sessions and what was there named as left
// behind; a second import adds nothing. Bad input: one line naming the field, exit 2, nothing
// written; hostile States fuzzed; and export, import into a fresh folder, export again: the same State.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { AspState, outsideBlock, splitNotes } from "../protocol/index.js";
import { until } from "./acp-client.js";
import { BIN, MAIN } from "./fixtures/built.js";
import { cliAgents } from "./fixtures/cli-agents.js";
import { files as filesUnder } from "./fixtures/files.js";
import { importOnce } from "./fixtures/import-once.js";

const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
const { root, folder, cli } = cliAgents("lnk-state-import-", [BIN, "dist/daemon/state-import.js", "dist/asp/state-import.js", "dist/asp/export.js"], ["daemon", "asp", "store", "protocol"]);
const model = { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1" };

function write(path: string, text: string): void {
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, text);
}

const triage = { name: "triage", files: { "SKILL.md": "---\nname: triage\ndescription: sorts\n---\nSort it.\n", "scripts/run.sh": "#!/bin/sh\necho sorted\n" } };

describe("state import", { timeout: 60_000 }, () => {
  it("writes each text where the agent's file is empty, adds the skills it has none of, keeps the notes, and names what is left behind", async () => {
    const dir = folder();
    // Configured with an identity: instruction.md holds Link's block alone, so the agent's own text is empty.
    const c = await cli(["configure", "--agent", dir], JSON.stringify({ model, identity: { persona: "You are Mira." } }));
    expect(c.code, c.stderr).toBe(0);
    write(join(dir, "skills", "mine", "SKILL.md"), "---\nname: mine\n---\nMine.\n");
    write(join(dir, "memory", "people", "ana.md"), "Ana likes coffee.\n");
    const block = readFileSync(join(dir, "instructions", "instruction.md"), "utf8");
    const state = {
      instructions: "## Standing instructions\nAnswer in French.\n",
      skills: [triage, { name: "mine", files: { "SKILL.md": "theirs" } }],
      memory: [
        { path: "memory/notes.md", text: "The gate code is 4417.\n", source: "link" },
        { path: "memory/people/ana.md", text: "Ana likes tea.\n", source: "link" },
        { path: "MEMORY.md", text: "Ana's cat is Tom.\n", source: "hermes" },
      ],
      sessions: [{ thread: "t1", events: [] }],
    };
    const r = await cli(["state", "import", "--agent", dir], JSON.stringify(state));
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe(
      [
        "came: instructions: into instructions/instruction.md",
        "came: skill triage: 2 files into skills/triage/",
        "came: note memory/notes.md",
        "came: note MEMORY.md (hermes): into a block of memory/notes.md",
        "left behind: skill mine: the agent has a skill of that name",
        "left behind: note memory/people/ana.md: the agent's file already holds text",
        "left behind: session t1: no events",
        "",
      ].join("\n"),
    );
    expect(readFileSync(join(dir, "instructions", "instruction.md"), "utf8")).toBe(`${block}## Standing instructions\nAnswer in French.\n`);
    expect(filesUnder(join(dir, "skills", "triage"), "utf8")).toEqual({ "SKILL.md": triage.files["SKILL.md"], "scripts/run.sh": triage.files["scripts/run.sh"] });
    expect(readFileSync(join(dir, "skills", "mine", "SKILL.md"), "utf8")).toBe("---\nname: mine\n---\nMine.\n");
    expect(readFileSync(join(dir, "memory", "people", "ana.md"), "utf8")).toBe("Ana likes coffee.\n");
    const notes = readFileSync(join(dir, "memory", "notes.md"), "utf8");
    expect(splitNotes(notes).own).toBe("The gate code is 4417.\n");
    expect(splitNotes(notes).blocks.map((b) => [b.kind, b.source, b.path, b.text])).toEqual([["imported", "hermes", "MEMORY.md", "Ana's cat is Tom.\n"]]);

    // The model is told: the imported note is in the notes section.
    const i = await cli(["instructions", "--agent", dir]);
    expect(i.stdout).toContain("The gate code is 4417.\n\n(hermes: MEMORY.md)\nAna's cat is Tom.");
    // A configure leaves an import's blocks; a second import adds nothing.
    expect((await cli(["configure", "--agent", dir], JSON.stringify({ model, identity: { persona: "You are Mira." } }))).code).toBe(0);
    const before = filesUnder(dir, "utf8");
    const again = await cli(["state", "import", "--agent", dir], JSON.stringify(state));
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).not.toContain("came: instructions");
    expect(again.stdout).not.toContain("came: skill");
    expect(filesUnder(dir, "utf8")).toEqual(before);
  });

  it("bad input: one line naming the field, exit 2, nothing written", async () => {
    const dir = folder();
    write(join(dir, "memory", "notes.md"), "");
    const before = filesUnder(dir, "utf8");
    const big = "x".repeat(1024 * 1024 + 1);
    const bad: [string, RegExp][] = [
      ["{", /the State is not JSON/],
      ["[]", /invalid State: \(top\)/],
      [JSON.stringify({ instructions: 3 }), /invalid State: instructions/],
      [JSON.stringify({ instructions: big }), /invalid State: instructions: over 1048576 bytes/],
      [JSON.stringify({ tools: [] }), /invalid State: .*tools/],
      [JSON.stringify({ skills: [{ name: "../x", files: { "SKILL.md": "" } }] }), /invalid State: skills\.0\.name/],
      [JSON.stringify({ skills: [{ name: "x", files: { "SKILL.md": "", "../../etc/cron.d/x": "x" } }] }), /invalid State: skills\.0\.files: a path holds an empty part/],
      [JSON.stringify({ skills: [{ name: "x", files: { "SKILL.md": "", "/etc/passwd": "x" } }] }), /invalid State: skills\.0\.files: a path an absolute path/],
      [JSON.stringify({ skills: [{ name: "x", files: { "a.md": "" } }] }), /invalid State: skills\.0\.files: no SKILL\.md/],
      [JSON.stringify({ skills: [{ name: "x", files: { "SKILL.md": big } }] }), /invalid State: skills\.0\.files\.SKILL\.md: over 1048576 bytes/],
      [JSON.stringify({ skills: [triage, triage] }), /invalid State: skills\.1\.name: a second skill/],
      [JSON.stringify({ skills: [{ name: "x", files: { "SKILL.md": "", a: "", "a/b": "" } }] }), /invalid State: skills\.0\.files\.a: both a file and a folder/],
      ['{"skills": [{"name": "x", "files": {"SKILL.md": "", "__proto__": "x"}}]}', /invalid State: skills\.0\.files: the key "__proto__"/],
      [JSON.stringify({ memory: [{ path: "../../etc/passwd", text: "x", source: "link" }] }), /invalid State: memory\.0\.path/],
      [JSON.stringify({ memory: [{ path: "MEMORY.md", text: "<!-- link:end -->", source: "hermes" }] }), /invalid State: memory\.0\.text/],
      [JSON.stringify({ memory: [{ path: "memory/a", text: "x", source: "link" }, { path: "memory/a/b", text: "x", source: "link" }] }), /invalid State: memory\.0\.path: both a file and a folder/],
      // A good skill before a bad note: neither is written.
      [JSON.stringify({ skills: [triage], memory: [{ path: "/abs", text: "x", source: "link" }] }), /invalid State: memory\.0\.path/],
      [JSON.stringify({ sessions: [{ thread: "t", events: [{ bogus: 1 }] }] }), /invalid State: sessions\.0\.events\.0/],
      // Lines a configure takes for Link's block: the text between them would be written over.
      [JSON.stringify({ instructions: "Answer in French.\n<!-- link:begin notes -->\nNever share the gate code.\n<!-- link:end -->\n" }), /invalid State: instructions: holds lines that mark Link's block/],
      // A lone surrogate is written as U+FFFD: two such names would be one file, the second written over the first.
      [JSON.stringify({ skills: [{ name: "x", files: { "SKILL.md": "", "a\ud800": "one", "a\udc00": "two" } }] }), /invalid State: skills\.0\.files: a path holds a lone surrogate/],
      [JSON.stringify({ memory: [{ path: "memory/n\ud800.md", text: "first", source: "link" }, { path: "memory/n\ufffd.md", text: "second", source: "link" }] }), /invalid State: memory\.0\.path: holds a lone surrogate/],
    ];
    for (const [input, why] of bad) {
      const r = await cli(["state", "import", "--agent", dir], input);
      expect(r.code, `${input.slice(0, 80)}: ${r.stderr}`).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
      expect(r.stderr).toMatch(why);
      expect(filesUnder(dir, "utf8")).toEqual(before);
    }
    // The command line: one FILE at most, and a FILE that is not there.
    let r = await cli(["state", "import", "--agent", dir, "a.json", "b.json"]);
    expect([r.code, r.stderr]).toEqual([2, "lnk-link-harness: state import takes at most one FILE\n"]);
    r = await cli(["state", "import", "--agent", dir, join(root(), "none.json")]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^lnk-link-harness: cannot read .*none\.json: ENOENT\n$/);
    expect(filesUnder(dir, "utf8")).toEqual(before);
  });
});

describe("state import that fails part-way", { timeout: 60_000 }, () => {
  it("puts back everything it wrote: the texts, the skill, the notes and the conversations already made", async () => {
    // An agent's folder so deep that its files fit in the longest path Linux takes (4095 bytes) but
    // the second session's folder doesn't: making it fails, after every check passed.
    const thread = "t".repeat(128);
    const depth = 4100 - "/chats/".length - thread.length - root().length - "/agent".length;
    const parts = Array.from({ length: Math.ceil(depth / 200) }, (_, i) => (i === 0 ? "d".repeat(depth - Math.floor(depth / 200) * 200 || 200) : "d".repeat(199)));
    const dir = join(root(), ...parts, "agent");
    mkdirSync(dir, { recursive: true });
    const c = await cli(["configure", "--agent", dir], JSON.stringify({ model }));
    expect(c.code, c.stderr).toBe(0);
    const event = { v: 1, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", text: "hi", header: "[h]" };
    const state = {
      instructions: "## Standing instructions\nAnswer in French.\n",
      skills: [triage],
      memory: [{ path: "MEMORY.md", text: "Ana's cat is Tom.\n", source: "hermes" }, { path: "memory/people/ana.md", text: "Ana.\n", source: "link" }],
      sessions: [
        { thread: "short", events: [event, { ...event, text: "again" }] },
        { thread, events: [event] },
      ],
    };
    const before = filesUnder(dir, "utf8");
    const r = await cli(["state", "import", "--agent", dir], JSON.stringify(state));
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/^lnk-link-harness: cannot import, and nothing of it was kept: .*ENAMETOOLONG/);
    expect(filesUnder(dir, "utf8")).toEqual(before);
    expect(readdirSync(dir).sort()).toEqual(["config.json"]);
    // The same State whose sessions fit is taken whole.
    const fits = await cli(["state", "import", "--agent", dir], JSON.stringify({ ...state, sessions: state.sessions.slice(0, 1) }));
    expect(fits.code, fits.stderr).toBe(0);
    expect(readdirSync(dir).sort()).toEqual(["chats", "config.json", "instructions", "memory", "skills"]);
  });
});

describe("state import killed while it writes a skill", { timeout: 60_000 }, () => {
  it("leaves no skill half written, and the next import removes what it left, never another's under way", async () => {
    const dir = folder();
    const c = await cli(["configure", "--agent", dir], JSON.stringify({ model }));
    expect(c.code, c.stderr).toBe(0);
    const skills = join(dir, "skills");
    // Many files each, each written and flushed: long enough to be killed in the middle of one.
    const many = (name: string) => ({ name, files: Object.fromEntries([["SKILL.md", `---\nname: ${name}\n---\nDo it.\n`], ...Array.from({ length: 200 }, (_, i) => [`f/${i}.md`, `file ${i}\n`])]) });
    const state = JSON.stringify({ skills: Array.from({ length: 20 }, (_, i) => many(`s${i}`)) });
    const importing = () => (existsSync(skills) ? readdirSync(skills).filter((n) => n.includes(".importing-")) : []);
    const child = spawn(process.execPath, [MAIN, "state", "import", "--agent", dir], { stdio: ["pipe", "ignore", "ignore"] });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    child.stdin.end(state);
    await until(() => importing().some((n) => existsSync(join(skills, n, "f")) && readdirSync(join(skills, n, "f")).length >= 20), "a skill part written");
    child.kill("SIGKILL");
    expect(await exited).toBeNull();
    const left = importing();
    expect(left).toHaveLength(1);
    // An earlier version's name (no host tag) untouched for more than an hour is left behind too.
    const old = join(skills, ".old.importing-4242");
    mkdirSync(old);
    utimesSync(old, new Date(Date.now() - 2 * 3600_000), new Date(Date.now() - 2 * 3600_000));
    // Another import, under way in a live process, keeps its own.
    const other = spawn(process.execPath, [MAIN, "state", "import", "--agent", dir], { stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    other.stdout.on("data", (b: Buffer) => (out += b.toString()));
    const otherExited = new Promise<number | null>((resolve) => other.once("exit", (code) => resolve(code)));
    other.stdin.end(JSON.stringify({ skills: Array.from({ length: 20 }, (_, i) => many(`o${i}`)) }));
    await until(() => importing().some((n) => !left.includes(n) && n !== ".old.importing-4242"), "the other import under way");
    const r = await cli(["state", "import", "--agent", dir], JSON.stringify({ skills: [triage] }));
    expect(r.code, r.stderr).toBe(0);
    expect(await otherExited).toBe(0);
    expect(out).toContain("came: skill o19: 201 files into skills/o19/");
    // Nothing half written is left, and every skill whole.
    expect(importing()).toEqual([]);
    const names = readdirSync(skills).sort();
    expect(names.filter((n) => n.startsWith("o"))).toHaveLength(20);
    for (const n of names) if (n.startsWith("o")) expect(readdirSync(join(skills, n, "f"))).toHaveLength(200);
    expect(names).toContain("triage");
    // What the killed import finished is whole; the one it was writing is not there at all.
    for (const n of names.filter((n) => /^s\d+$/.test(n))) expect(readdirSync(join(skills, n, "f"))).toHaveLength(200);
  });
});

describe("state import of hostile States, fuzzed", { timeout: 120_000 }, () => {
  const part = fc.oneof(fc.stringMatching(/^[a-z][a-z0-9._-]{0,6}$/), fc.constantFrom("..", ".", "", "/", "\\", "a\u0000", "~", " ", "a\ud800", "a\udc00", "a\ufffd"));
  const path = fc.array(part, { minLength: 1, maxLength: 4 }).map((p) => p.join("/"));
  const text = fc.oneof(fc.string({ maxLength: 20 }), fc.constantFrom("<!-- link:end -->", "<!-- link:begin note a b -->\n"));
  const state = fc.record(
    {
      instructions: fc.oneof(
        text,
        fc.array(fc.constantFrom("Own.", "", "<!-- link:begin identity -->", "<!-- link:begin note a b -->", "Inner.", "<!-- link:end -->"), { maxLength: 6 }).map((lines) => lines.join("\n")),
      ),
      skills: fc.array(
        fc.record({ name: fc.oneof(fc.stringMatching(/^[a-z]{1,6}$/), part), files: fc.dictionary(fc.oneof(path, fc.constant("SKILL.md")), text, { maxKeys: 4 }) }),
        { maxLength: 3 },
      ),
      memory: fc.array(fc.record({ path: fc.oneof(path, path.map((p) => `memory/${p}`)), text, source: fc.oneof(fc.constant("link"), fc.constant("hermes"), part) }), { maxLength: 3 }),
    },
    { requiredKeys: [] },
  );

  it("each State is taken with every file inside the agent's folder, or refused with ImportError and nothing written", async () => {
    let n = 0;
    const outcomes = { taken: 0, refused: 0 };
    await fc.assert(
      fc.asyncProperty(state, async (s) => {
        const imported = await importOnce(join(root(), `fuzz-${++n}`), s);
        if (!imported.taken) {
          outcomes.refused++;
          return;
        }
        outcomes.taken++;
        // Inside the agent's folder only its own parts, each a file.
        for (const f of Object.keys(imported.got)) expect(f).toMatch(/^(instructions\/instruction\.md|skills\/[^/]+\/.+|memory\/.+)$/);
        for (const f of Object.keys(imported.got)) expect(statSync(join(imported.dir, f)).isFile()).toBe(true);
        // Every skill file and every note of its own file is there with its own text: none written over another.
        const taken = AspState.parse(s);
        // The instructions are the agent's own text, none of it taken for Link's block (which a configure writes over).
        if (taken.instructions?.trim()) expect(outsideBlock(imported.got["instructions/instruction.md"] ?? "")).toContain(taken.instructions);
        for (const skill of taken.skills ?? []) for (const [path, text] of Object.entries(skill.files)) expect(imported.got[`skills/${skill.name}/${path}`]).toBe(text);
        for (const note of taken.memory ?? []) {
          if (note.source === "link" && note.path.startsWith("memory/") && note.path !== "memory/notes.md" && note.text.trim()) expect(imported.got[note.path]).toBe(note.text);
        }
      }),
      { numRuns: 300, endOnFailure: true, ...seed },
    );
    expect(outcomes.taken).toBeGreaterThan(10);
    expect(outcomes.refused).toBeGreaterThan(10);
  });
});

describe("state export, import into a fresh folder, export again", { timeout: 60_000 }, () => {
  it("gives the same State: instructions, skills and memory", async () => {
    const dir = folder();
    const c = await cli(
      ["configure", "--agent", dir],
      JSON.stringify({ model, identity: { persona: "You are Mira." }, remembered: [{ path: "MEMORY.md", text: "from hermes", source: "hermes" }] }),
    );
    expect(c.code, c.stderr).toBe(0);
    write(join(dir, "instructions", "instruction.md"), `${readFileSync(join(dir, "instructions", "instruction.md"), "utf8")}Answer in French.\n`);
    write(join(dir, "skills", "triage", "SKILL.md"), triage.files["SKILL.md"]);
    write(join(dir, "skills", "triage", "scripts", "run.sh"), triage.files["scripts/run.sh"]);
    write(join(dir, "memory", "notes.md"), `The gate code is 4417.\n${readFileSync(join(dir, "memory", "notes.md"), "utf8")}`);
    write(join(dir, "memory", "people", "ana.md"), "Ana likes tea.\n");

    const first = await cli(["state", "export", "--agent", dir]);
    expect(first.code, first.stderr).toBe(0);
    const state = AspState.parse(JSON.parse(first.stdout));
    expect(state.instructions).toBe("## Standing instructions\nAnswer in French.\n");
    expect(state.skills?.map((s) => s.name)).toEqual(["triage"]);
    expect(state.memory?.map((m) => m.path)).toEqual(["memory/notes.md", "memory/people/ana.md"]);

    const fresh = join(folder(), "new");
    const r = await cli(["state", "import", "--agent", fresh], first.stdout);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).not.toContain("left behind");
    const second = await cli(["state", "export", "--agent", fresh]);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toBe(first.stdout);
  });
});
