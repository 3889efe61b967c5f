// `state export` over the built command line: the agent's own instruction text, skills and memory
// in ASP's portable forms, and nothing Link wrote in (its block, its skills' copies, the settings'
// remembered notes, the key); what it can't carry named on stderr; a hostile folder, fuzzed.
import { execFileSync } from "node:child_process";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { AspState, Contract } from "../protocol/index.js";
import { failure, openClient, startDaemon, stdioStream, type Daemon } from "./acp-client.js";
import { BIN } from "./fixtures/built.js";
import { cliAgents } from "./fixtures/cli-agents.js";
import * as acp from "@agentclientprotocol/sdk";

const SECRET = "sk-SECRET-export";
const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
const { folder, cli } = cliAgents("lnk-export-", [BIN, "dist/daemon/commands.js", "dist/asp/export.js", "dist/store/tree.js"], ["daemon", "asp", "store", "protocol"]);
const model = { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1", key: SECRET };

function write(path: string, text: string | Buffer): void {
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, text);
}

describe("state export", { timeout: 60_000 }, () => {
  it("prints the agent's own instructions, skills and memory, and leaves out what Link wrote in", async () => {
    const dir = folder();
    const home = folder();
    write(join(dir, "instructions", "instruction.md"), "Answer in French.\nSign as Ana.");
    write(join(dir, "skills", "triage", "SKILL.md"), "---\nname: triage\ndescription: sorts\n---\nSort it.\n");
    write(join(dir, "skills", "triage", "scripts", "run.sh"), "#!/bin/sh\necho sorted\n");
    write(join(dir, "skills", "triage", "logo.png"), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0xff]));
    symlinkSync("/etc/hostname", join(dir, "skills", "triage", "host"));
    write(join(dir, "memory", "notes.md"), "The gate code is 4417.\n");
    write(join(dir, "memory", "people", "ana.md"), "Ana likes tea.\n");
    // Link's own: the identity's skill copied into the home, and notes remembered on other harnesses.
    write(join(home, ".lnk", "agent", "skills", "copied", "SKILL.md"), "---\nname: copied\n---\n");
    const settings = {
      model,
      identity: { persona: "You are Mira.", owner: "Ana.", skills: ["copied"] },
      remembered: [{ path: "MEMORY.md", text: "from hermes", source: "hermes" }],
    };
    const c = await cli(["configure", "--agent", dir, "--home", home], JSON.stringify(settings));
    expect(c.code, c.stderr).toBe(0);

    const r = await cli(["state", "export", "--agent", dir, "--home", home]);
    expect(r.code, r.stderr).toBe(0);
    const state = AspState.parse(JSON.parse(r.stdout));
    expect(state).toEqual({
      instructions: "## Standing instructions\nAnswer in French.\nSign as Ana.\n",
      skills: [{ name: "triage", files: { "SKILL.md": "---\nname: triage\ndescription: sorts\n---\nSort it.\n", "scripts/run.sh": "#!/bin/sh\necho sorted\n" } }],
      memory: [
        { path: "memory/notes.md", text: "The gate code is 4417.\n", source: "link" },
        { path: "memory/people/ana.md", text: "Ana likes tea.\n", source: "link" },
      ],
    });
    for (const link of ["You are Mira", "copied", "from hermes", SECRET, "<!-- link:"]) expect(r.stdout).not.toContain(link);
    expect(r.stderr).toBe(
      "lnk-link-harness: left out of the export: skills/triage/host: a symbolic link\n" + "lnk-link-harness: left out of the export: skills/triage/logo.png: not UTF-8 text\n",
    );
    // Exporting writes nothing.
    const again = await cli(["state", "export", "--agent", dir, "--home", home]);
    expect(again.stdout).toBe(r.stdout);
  });

  it("gives the owner's text as it is when it already says which text it is, and an empty agent as empty lists", async () => {
    const dir = folder();
    write(join(dir, "instructions", "instruction.md"), "## Your owner\nAna, in Lyon.\n");
    let r = await cli(["state", "export", "--agent", dir]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ instructions: "## Your owner\nAna, in Lyon.\n", skills: [], memory: [] });
    r = await cli(["state", "export", "--agent", join(folder(), "none")]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ skills: [], memory: [] });
  });

  it("a file over the limit is left out, saying so; a skills/ that is a link fails with one line and prints nothing", async () => {
    const dir = folder();
    write(join(dir, "memory", "big.md"), "x".repeat(1024 * 1024 + 1));
    write(join(dir, "memory", "notes.md"), "kept\n");
    let r = await cli(["state", "export", "--agent", dir]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ skills: [], memory: [{ path: "memory/notes.md", text: "kept\n", source: "link" }] });
    expect(r.stderr).toMatch(/^lnk-link-harness: left out of the export: memory\/big\.md: over the limit of 1048576 bytes\n$/);

    // The instructions over it: what a turn reads of them (their first 1 MiB) is carried, and the cut said.
    const long = folder();
    const line = "Always answer in French.\n";
    write(join(long, "instructions", "instruction.md"), `${line.repeat(Math.ceil((1.5 * 1024 * 1024) / line.length))}THE LAST RULE\n`);
    r = await cli(["state", "export", "--agent", long]);
    expect(r.code, r.stderr).toBe(0);
    const cut = String(JSON.parse(r.stdout).instructions);
    expect([cut.startsWith(`## Standing instructions\n${line}`), cut.includes("THE LAST RULE")]).toEqual([true, false]);
    expect(r.stderr).toBe("lnk-link-harness: left out of the export: instructions/instruction.md: over the limit of 1048576 bytes: only its first 1048576 bytes carried\n");

    const other = folder();
    mkdirSync(join(other, "elsewhere", "x"), { recursive: true });
    symlinkSync(join(other, "elsewhere"), join(dir, "skills"));
    r = await cli(["state", "export", "--agent", dir]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/^lnk-link-harness: refused: [^\n]*skills is a symbolic link\n$/);
  });

  it("a memory file no note can be, and a SKILL.md that is a link or a FIFO, are each left out, saying so; the rest is exported", async () => {
    const dir = folder();
    write(join(dir, "memory", "my notes.md"), "a name with a space\n");
    write(join(dir, "memory", "kept.md"), "kept\n");
    write(join(dir, "skills", "good", "SKILL.md"), "---\nname: good\n---\nGood.\n");
    mkdirSync(join(dir, "skills", "linked"), { recursive: true });
    symlinkSync("/etc/hostname", join(dir, "skills", "linked", "SKILL.md"));
    mkdirSync(join(dir, "skills", "piped"), { recursive: true });
    execFileSync("mkfifo", [join(dir, "skills", "piped", "SKILL.md")]);
    const r = await cli(["state", "export", "--agent", dir]);
    expect(r.code, r.stderr).toBe(0);
    const state = AspState.parse(JSON.parse(r.stdout));
    expect(state.skills?.map((sk) => sk.name)).toEqual(["good"]);
    expect(state.memory).toEqual([{ path: "memory/kept.md", text: "kept\n", source: "link" }]);
    const lines = r.stderr.trimEnd().split("\n");
    expect(lines).toHaveLength(3);
    expect(lines.some((l) => l.startsWith("lnk-link-harness: left out of the export: memory/my notes.md: not a note ASP carries: "))).toBe(true);
    expect(lines.some((l) => l.startsWith("lnk-link-harness: left out of the export: skills/linked/SKILL.md: "))).toBe(true);
    expect(lines.some((l) => l.startsWith("lnk-link-harness: left out of the export: skills/piped/SKILL.md: "))).toBe(true);
  });

  it("a skill's file whose name no import takes, and a skill whose SKILL.md is not UTF-8, are left out, named; what is printed imports", async () => {
    const dir = folder();
    write(join(dir, "skills", "good", "SKILL.md"), "---\nname: good\n---\nGood.\n");
    write(join(dir, "skills", "good", "back\\slash.md"), "a backslash in its name\n");
    write(join(dir, "skills", "good", "bell\u0007.md"), "a control character in its name\n");
    write(join(dir, "skills", "latin", "SKILL.md"), Buffer.from("---\nname: latin\n---\nCaf\xe9.\n", "latin1"));
    const r = await cli(["state", "export", "--agent", dir]);
    expect(r.code, r.stderr).toBe(0);
    const state = AspState.parse(JSON.parse(r.stdout));
    expect(state.skills?.map((sk) => [sk.name, Object.keys(sk.files)])).toEqual([["good", ["SKILL.md"]]]);
    expect(r.stderr).toContain("left out of the export: skills/good/back\\slash.md: its name holds a backslash or a control character: not carried");
    expect(r.stderr).toContain("left out of the export: skills/latin: its SKILL.md is not carried, and a skill is not without it");
    // What is printed, another agent takes whole.
    const other = folder();
    const taken = await cli(["state", "import", "--agent", other], r.stdout);
    expect(taken.code, taken.stderr).toBe(0);
  });

  it("carries at most what state import takes (64 MiB less room for its frame): past them a note is left out, named, and what is printed imports", async () => {
    const dir = folder();
    const mib = "m".repeat(1024 * 1024 - 64);
    for (let i = 0; i < 70; i++) write(join(dir, "memory", `n${String(i).padStart(2, "0")}.md`), mib);
    const r = await cli(["state", "export", "--agent", dir]);
    expect(r.code, r.stderr).toBe(0);
    const state = AspState.parse(JSON.parse(r.stdout));
    const kept = state.memory?.length ?? 0;
    expect(kept).toBeGreaterThan(60);
    expect(kept).toBeLessThan(70);
    const lines = r.stderr.trimEnd().split("\n");
    expect(lines).toHaveLength(70 - kept);
    for (const line of lines) expect(line).toMatch(/^lnk-link-harness: left out of the export: memory\/n\d\d\.md: past the 67043328 bytes one export carries$/);
    const file = join(folder(), "state.json");
    writeFileSync(file, r.stdout);
    const back = await cli(["state", "import", "--agent", join(folder(), "back"), file]);
    expect(back.code, back.stderr).toBe(0);
  });

  it("state export takes no other argument", async () => {
    const r = await cli(["state", "export", "more", "--agent", folder()]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
  });
});

describe("state export of a hostile folder, fuzzed", { timeout: 120_000 }, () => {
  it("instructions whose own text holds a second block of Link's markers are left out, named: no import takes them; the rest is exported", async () => {
    const dir = folder();
    write(join(dir, "instructions", "instruction.md"), "<!-- link:begin identity -->\n## Who you are\nMira\n<!-- link:end -->\nOwn.\n<!-- link:begin notes -->\nInner.\n<!-- link:end -->\n");
    write(join(dir, "memory", "a.md"), "A note.\n");
    const r = await cli(["state", "export", "--agent", dir]);
    expect(r.code, r.stderr).toBe(0);
    expect(AspState.parse(JSON.parse(r.stdout))).toEqual({ skills: [], memory: [{ path: "memory/a.md", text: "A note.\n", source: "link" }] });
    expect(r.stderr).toBe(
      "lnk-link-harness: left out of the export: instructions/instruction.md: its text outside Link's block holds lines that mark Link's block (\"<!-- link:begin\" to \"<!-- link:end -->\"), which the next configure would write over: not carried\n",
    );
    const taken = await cli(["state", "import", "--agent", folder()], r.stdout);
    expect(taken.code, taken.stderr).toBe(0);
  });

  it("prints valid ASP holding only files of the agent's folder, or fails with one line", async () => {
    const name = fc.oneof(fc.constantFrom("SKILL.md", "notes.md", "..x", "a b", "é", "__proto__", "constructor"), fc.stringMatching(/^[a-z][a-z0-9.]{0,6}$/));
    const entry = fc.record({
      where: fc.constantFrom("skills/s", "skills/s/d", "memory", "memory/d/e", "skills/t"),
      name,
      kind: fc.constantFrom("text", "binary", "link", "fifo-like folder", "link to folder"),
      text: fc.string({ maxLength: 40 }),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(entry, { maxLength: 8 }), async (entries) => {
        const dir = folder();
        const outside = folder();
        write(join(outside, "secret.md"), "OUTSIDE");
        for (const e of entries) {
          const at = join(dir, e.where, e.name);
          try {
            mkdirSync(join(dir, e.where), { recursive: true });
            if (e.kind === "text") writeFileSync(at, e.text);
            else if (e.kind === "binary") writeFileSync(at, Buffer.from([0, 1, 2, 0xff]));
            else if (e.kind === "link") symlinkSync(join(outside, "secret.md"), at);
            else if (e.kind === "link to folder") symlinkSync(outside, at);
            else mkdirSync(at, { recursive: true });
          } catch {
            // A name taken by an earlier entry (a file where this one's folder would be, too): left as it is.
          }
        }
        const r = await cli(["state", "export", "--agent", dir]);
        if (r.code !== 0) {
          expect(r.stdout).toBe("");
          expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
          return;
        }
        AspState.parse(JSON.parse(r.stdout));
        expect(r.stdout).not.toContain("OUTSIDE");
        for (const line of r.stderr.split("\n").filter(Boolean)) expect(line).toMatch(/^lnk-link-harness: left out of the export: (skills|memory)\/[^\n]+: .+$/);
      }),
      { numRuns: 25, ...seed },
    );
  });
});

describe("_asp/export over ACP", { timeout: 60_000 }, () => {
  it("gives the same State as state export, the kinds asked alone, and refuses bad params naming the field", async () => {
    const dir = folder();
    write(join(dir, "instructions", "instruction.md"), "Be brief.\n");
    write(join(dir, "skills", "triage", "SKILL.md"), "---\nname: triage\n---\n");
    write(join(dir, "memory", "notes.md"), "Gate 4417.\n");
    write(join(dir, "memory", "x.bin"), Buffer.from([0, 0xff]));
    const c0 = await cli(["configure", "--agent", dir], JSON.stringify({ model }));
    expect(c0.code, c0.stderr).toBe(0);
    const printed = await cli(["state", "export", "--agent", dir]);
    expect(printed.code, printed.stderr).toBe(0);

    let d: Daemon | undefined;
    try {
      d = startDaemon(["--agent", dir]);
      const c = await openClient(stdioStream(d.child));
      try {
        const init = await c.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
        const contract = Contract.parse(JSON.parse((await cli(["contract"])).stdout));
        // What initialize advertises is what the contract claims.
        expect(init.agentCapabilities?._meta).toMatchObject({ link: { agentState: contract.state } });
        expect(contract.state).toEqual({ export: ["instructions", "skills", "memory", "sessions"], import: ["sessions"] });

        // And every conversation (none yet) as sessions.
        expect(await c.agent.request("_asp/export", {})).toEqual({ ...JSON.parse(printed.stdout), sessions: [] });
        expect(await c.agent.request("_asp/export", { kinds: ["memory", "sessions"] })).toEqual({
          memory: [{ path: "memory/notes.md", text: "Gate 4417.\n", source: "link" }],
          sessions: [],
        });
        expect(await c.agent.request("_asp/export", { kinds: [], _meta: { link: { agent: dir.split("/").at(-1) } } })).toEqual({});
        for (const [params, field] of [
          [{ kinds: ["everything"] }, "kinds.0"],
          [{ kinds: "memory" }, "kinds"],
          [{ bogus: 1 }, "bogus"],
          [{ _meta: { link: { agent: "another" } } }, "_meta.link.agent"],
        ] as const) {
          const e = await failure(c.agent.request("_asp/export", params));
          expect(e.code, JSON.stringify(params)).toBe(-32602);
          expect(e.message).toContain(field);
        }
        await d.waitForLog(/left out of the export.*memory\/x\.bin/);
      } finally {
        c.close();
      }
    } finally {
      await d?.stop("SIGKILL");
    }
  });
});

describe("the sessions an export gives, held to a limit", () => {
  it("takes conversations in the order of their names while they fit, names the one past it, and goes on with those after", async () => {
    const { exportSessions } = await import("../asp/sessions.js");
    const dir = folder();
    const said = (text: string) => `${JSON.stringify({ v: 1, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", text, header: "[h]" })}\n`;
    for (const [thread, size] of [["a", 100], ["b", 5_000], ["c", 100]] as const) {
      mkdirSync(join(dir, "chats", thread), { recursive: true });
      for (let i = 1; i <= 3; i++) write(join(dir, "chats", thread, `${String(i).padStart(12, "0")}.json`), said("x".repeat(size)));
    }
    const got = exportSessions({ dir }, 2_000);
    expect(got.sessions.map((s) => [s.thread, s.events.length])).toEqual([
      ["a", 3],
      ["c", 3],
    ]);
    expect(got.left).toEqual([{ path: "chats/b", why: "past the export's limit of 2000 bytes of sessions" }]);
    // What a session takes is what its JSON is.
    expect(got.sessions.reduce((sum, s) => sum + JSON.stringify(s).length, 0)).toBeLessThanOrEqual(2_000);
  });
});
