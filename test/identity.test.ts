// Who the agent is, in: configure's identity written into Link's block of instruction.md, the owner's
// text kept byte for byte, a second configure replacing the block; the identity's skills read from
// <home>/.lnk/agent/skills/; and the model's system prompt holding the texts and memory/notes.md.
import { existsSync, lstatSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { daemonTestHooks, scriptedSettings, startDaemon, stdioClient, tempDir, watched } from "./acp-client.js";
import type { ModelServer } from "./model-server.js";
import { BIN, MAIN } from "./fixtures/built.js";
import { run, type Run } from "./fixtures/child.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/commands.js", "dist/store/settings.js", "dist/turn/sections.js"], (s) => (server = s));

function folder(): string {
  const dir = tempDir("lnk-identity-");
  cleanup.push(() => dir.remove());
  return dir.path;
}

function configure(dir: string, settings: unknown, home?: string): Promise<Run> {
  return run(process.execPath, [MAIN, "configure", "--agent", dir, ...(home ? ["--home", home] : [])], { input: JSON.stringify(settings), ms: 15_000 });
}

const instruction = (dir: string) => join(dir, "instructions", "instruction.md");
const begins = (text: string) => text.split("\n").filter((l) => l.startsWith("<!-- link:begin")).length;

/** The owner's own text: no newline at its end, a tab, a CR, a BOM-less non-ASCII line, and a marker's look-alike inside a line. */
const OWNER = "Answer in French.\r\n\tAlways sign as Ana — 日本.\nsee <!-- link:end --> inline";

describe("identity in", { timeout: 60_000 }, () => {
  it("writes the texts into Link's block, the owner's text kept byte for byte; a second configure replaces the block; none takes it out", async () => {
    const dir = folder();
    mkdirSync(join(dir, "instructions"), { recursive: true });
    writeFileSync(instruction(dir), OWNER, { mode: 0o644 });
    const first = { persona: "You are Mira, a careful researcher.", owner: "Ana, a doctor in Lyon.", standing: "Cite your sources." };
    let r = await configure(dir, scriptedSettings(server.url, { identity: first }));
    expect(r.code, r.stderr).toBe(0);
    let text = readFileSync(instruction(dir), "utf8");
    expect(begins(text)).toBe(1);
    expect(text.endsWith(OWNER)).toBe(true);
    for (const t of Object.values(first)) expect(text).toContain(t);
    expect(text).toMatch(/## Who you are\nYou are Mira[\s\S]*## Your owner\nAna[\s\S]*## Standing instructions\nCite/);
    // The file's own mode is kept.
    expect(lstatSync(instruction(dir)).mode & 0o777).toBe(0o644);

    r = await configure(dir, scriptedSettings(server.url, { identity: { persona: "You are Mira, now terse." } }));
    expect(r.code, r.stderr).toBe(0);
    text = readFileSync(instruction(dir), "utf8");
    expect(begins(text)).toBe(1);
    expect(text).toContain("now terse");
    expect(text).not.toContain("Ana, a doctor");
    expect(text).not.toContain("Cite your sources");
    expect(text.endsWith(OWNER)).toBe(true);

    // The same configure again changes nothing.
    await configure(dir, scriptedSettings(server.url, { identity: { persona: "You are Mira, now terse." } }));
    expect(readFileSync(instruction(dir), "utf8")).toBe(text);

    // Settings with no identity take the block out: the file is the owner's again, exactly.
    r = await configure(dir, scriptedSettings(server.url));
    expect(r.code, r.stderr).toBe(0);
    expect(readFileSync(instruction(dir), "utf8")).toBe(OWNER);
  });

  it("an agent with no instruction.md gets one holding only the block; an identity with no text writes nothing", async () => {
    const dir = folder();
    let r = await configure(dir, scriptedSettings(server.url, { identity: { skills: [] } }));
    expect(r.code, r.stderr).toBe(0);
    expect(existsSync(instruction(dir))).toBe(false);
    r = await configure(dir, scriptedSettings(server.url, { identity: { owner: "Ana." } }));
    expect(r.code, r.stderr).toBe(0);
    expect(readFileSync(instruction(dir), "utf8")).toMatch(/^<!-- link:begin [^\n]*-->\n## Your owner\nAna\.\n<!-- link:end -->\n$/);
    expect(lstatSync(instruction(dir)).mode & 0o777).toBe(0o600);
  });

  it("bad identity is refused with one line naming the field, and writes nothing", async () => {
    const dir = folder();
    mkdirSync(join(dir, "instructions"), { recursive: true });
    writeFileSync(instruction(dir), OWNER);
    for (const [identity, field] of [
      [{ persona: "x <!-- link:end --> y" }, "identity.persona"],
      [{ standing: "<!-- link:begin -->" }, "identity.standing"],
      [{ skills: ["../../etc"] }, "identity.skills.0"],
      [{ skills: ["a/b"] }, "identity.skills.0"],
      [{ skills: [".hidden"] }, "identity.skills.0"],
      [{ owner: 5 }, "identity.owner"],
      [{ persona: "p", name: "x" }, "identity"],
    ] as const) {
      const r = await configure(dir, scriptedSettings(server.url, { identity }));
      expect(r.code, JSON.stringify(identity)).toBe(2);
      expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
      expect(r.stderr).toContain(field);
      expect(existsSync(join(dir, "config.json"))).toBe(false);
      expect(readFileSync(instruction(dir), "utf8")).toBe(OWNER);
    }
  });

  it("an instruction.md that is a link is refused, and neither it nor config.json is written", async () => {
    const dir = folder();
    const elsewhere = join(folder(), "theirs.md");
    writeFileSync(elsewhere, "not the agent's");
    mkdirSync(join(dir, "instructions"), { recursive: true });
    symlinkSync(elsewhere, instruction(dir));
    const r = await configure(dir, scriptedSettings(server.url, { identity: { persona: "Mira" } }));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^lnk-link-harness: cannot write who the agent is: refused: [^\n]+ symbolic link\n$/);
    expect(existsSync(join(dir, "config.json"))).toBe(false);
    expect(readFileSync(elsewhere, "utf8")).toBe("not the agent's");
  });

  it("the model's system prompt holds the identity, the owner's text, the notes and the identity's skills", async () => {
    const dir = folder();
    const home = folder();
    mkdirSync(join(dir, "instructions"), { recursive: true });
    writeFileSync(instruction(dir), "Keep answers under 50 words.\n");
    mkdirSync(join(dir, "memory"), { recursive: true });
    writeFileSync(join(dir, "memory", "notes.md"), "The gate code is 4417.\n");
    const skill = (root: string, name: string, description: string) => {
      mkdirSync(join(root, name), { recursive: true });
      writeFileSync(join(root, name, "SKILL.md"), `---\nname: ${name}\ndescription: ${description}\n---\nDo it.\n`);
    };
    const copies = join(home, ".lnk", "agent", "skills");
    skill(copies, "triage", "sorts the inbox");
    skill(copies, "unnamed", "a copy the settings don't name");
    skill(copies, "own", "the copy, shadowed by the agent's own");
    skill(join(dir, "skills"), "own", "the agent's own");
    const identity = { persona: "You are Mira.", owner: "Ana, a doctor.", standing: "Cite your sources.", skills: ["triage", "own", "missing"] };
    const r = await configure(dir, scriptedSettings(server.url, { identity }), home);
    expect(r.code, r.stderr).toBe(0);

    const d = watched(startDaemon(["--agent", dir, "--home", home]), cleanup);
    const c = await stdioClient(d, cleanup);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    server.script({ text: "ok" });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "hi" }] });
    const system = server.requests[0]?.body.messages?.[0];
    expect(system?.role).toBe("system");
    const prompt = String(system?.content);
    expect(prompt).toContain("## Who you are\nYou are Mira.");
    expect(prompt).toContain("## Your owner\nAna, a doctor.");
    expect(prompt).toContain("## Standing instructions\nCite your sources.\n\nKeep answers under 50 words.");
    // Once each: the base no longer repeats who the agent is.
    expect(prompt.split("You are Mira.").length).toBe(2);
    expect(prompt).not.toContain("<!-- link:");
    expect(prompt).toContain("The gate code is 4417.");
    expect(prompt).toContain(`- triage: sorts the inbox (${join(copies, "triage", "SKILL.md")})`);
    expect(prompt).toContain("- own: the agent's own");
    expect(prompt).not.toContain("shadowed");
    expect(prompt).not.toContain("unnamed");
    // The identity's skill runs as a command like the agent's own.
    server.script({ text: "sorted" });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "/skill:triage" }] });
    expect(JSON.stringify(server.requests[1]?.body.messages)).toContain("Do it.");
  });
});
