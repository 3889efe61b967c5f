// The man pages: each renders without a warning, and says what the code does.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  AssistantMessage,
  COMMAND_NAMES,
  Command,
  EVENT_KINDS,
  FAILURE_REASONS,
  Failure,
  From,
  STOP_REASONS,
  Thinking,
  ToolCall,
  ToolResult,
  ToolsList,
  Usage,
  UserMessage,
  WindowMark,
} from "../protocol/index.js";
import { USAGE } from "../daemon/cli.js";
import { COMMANDS, NOT_MAPPED } from "../turn/commands.js";
import { ROOT } from "./fixtures/built.js";

const MAN = join(ROOT, "man");
const pages = readdirSync(MAN).filter((n) => /\.[1-8]$/.test(n)).sort();

function has(command: string): boolean {
  return spawnSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" }).status === 0;
}
const groff = has("groff");
const man = has("man");

/** What rendering a page says on stderr: empty when it renders without a warning. */
function warnings(path: string): string {
  const r = groff
    ? spawnSync("groff", ["-man", "-Tutf8", "-ww", "-z", path], { encoding: "utf8", timeout: 20_000 })
    : spawnSync("man", ["--warnings", "-l", path], { encoding: "utf8", timeout: 20_000, env: { ...process.env, MANPAGER: "cat", MANWIDTH: "80" } });
  if (r.error) throw r.error;
  expect(r.status, r.stderr).toBe(0);
  return r.stderr;
}

/** Splits a macro line's arguments as troff does: by spaces, a quoted argument kept whole. */
function macroArgs(line: string): string[] {
  return [...line.matchAll(/"((?:[^"]|"")*)"|(\S+)/g)].map((m) => m[1] ?? m[2] ?? "");
}

/** Plain text of roff: escapes for dashes, quotes and zero-width marks undone. */
function plain(roff: string): string {
  return roff
    .replace(/\\[-%&]/g, (e) => (e === "\\-" ? "-" : ""))
    .replace(/\\e/g, "\\")
    .replace(/\\\(lq|\\\(rq/g, '"');
}

/** Every word the page sets in bold: a name it defines or names literally. */
function boldWords(roff: string): Set<string> {
  const words = new Set<string>();
  const add = (text: string) => {
    for (const w of plain(text).split(/[\s,;()[\]]+/)) if (w) words.add(w.replace(/[.]$/, "") || w);
  };
  for (const line of roff.split("\n")) {
    const m = /^\.(B|BR|RB|BI|IB)\s+(.*)$/.exec(line);
    if (m) {
      const args = macroArgs(m[2] ?? "");
      const boldFirst = m[1] === "B" || m[1] === "BR" || m[1] === "BI";
      args.forEach((a, i) => {
        if (m[1] === "B" || (i % 2 === 0) === boldFirst) add(a);
      });
    }
    for (const inline of line.matchAll(/\\fB(.*?)(?=\\f[RIP]|$)/g)) add(inline[1] ?? "");
  }
  return words;
}

describe("the man pages", () => {
  it("are a page for the command and one for the agent's folder", () => {
    expect(pages).toEqual(expect.arrayContaining(["lnk-link-harness.1", "lnk-link-harness-folder.5"]));
  });

  it.skipIf(!groff && !man)("the warning check finds a page's warning", () => {
    const dir = mkdtempSync(join(tmpdir(), "lnk-man-"));
    try {
      const bad = join(dir, "bad.1");
      writeFileSync(bad, ".TH BAD 1\n.SH NAME\nbad \\- a page with a mistake\n.NOSUCHMACRO x\n");
      expect(warnings(bad)).toMatch(/warning/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.skipIf(!groff && !man).each(pages)("%s renders without a warning", (page) => {
    expect(warnings(join(MAN, page))).toBe("");
  });

  it.skipIf(!man).each(pages)("%s reads with man -l", (page) => {
    const r = spawnSync("man", ["-l", join(MAN, page)], { encoding: "utf8", timeout: 20_000, env: { ...process.env, MANPAGER: "cat", MANWIDTH: "80" } });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/NAME/);
  });
});

describe("lnk-link-harness(1)", () => {
  const roff = readFileSync(join(MAN, "lnk-link-harness.1"), "utf8");
  const bold = boldWords(roff);

  it("has each section a command's page has", () => {
    const sections = [...roff.matchAll(/^\.SH\s+"?([^"\n]+)"?$/gm)].map((m) => m[1]);
    for (const s of ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT", "EXIT STATUS", "FILES", "SEE ALSO"]) expect(sections).toContain(s);
  });

  it("names every command, option and variable", () => {
    const options = new Set([...USAGE.matchAll(/--[a-z]+/g)].map((m) => m[0]));
    for (const o of ["--agent", "--files", "--home", "--socket", "--agents", "--blank", "--help", "--version", "-h", "-V"]) options.add(o);
    for (const word of [...options, "contract", "configure", "state", "export", "LNK_AGENT_DIR", "XDG_DATA_HOME", "LNK_TOOL_", "LNK_MEMORY", "LNK_DEBUG", "0", "1", "2"]) {
      expect(bold, word).toContain(word);
    }
  });
});

describe("lnk-link-harness-folder(5)", () => {
  const roff = readFileSync(join(MAN, "lnk-link-harness-folder.5"), "utf8");
  const bold = boldWords(roff);
  const keys = (schema: { shape: Record<string, unknown> }) => Object.keys(schema.shape);

  it("names every kind of event, every field and every value of its enumerations", () => {
    const fields = [
      ...keys(UserMessage),
      ...keys(AssistantMessage),
      ...keys(ToolResult),
      ...keys(Command),
      ...keys(Failure),
      ...keys(Failure.shape.sent.unwrap()),
      ...keys(From),
      ...keys(Usage),
      ...keys(Thinking),
      ...keys(ToolCall),
      "type",
      "image_url",
      "url",
      "file",
      "file_data",
      "filename",
    ];
    for (const word of [...Object.values(EVENT_KINDS), ...fields, ...COMMAND_NAMES, ...STOP_REASONS, ...FAILURE_REASONS]) {
      expect(bold, word).toContain(word);
    }
  });

  it("names every field of window.json and tools.json, and every file of the folder", () => {
    for (const word of [...keys(WindowMark), ...keys(ToolsList), "config.json", "instructions/instruction.md", "memory/notes.md", "transcript.md", "window.json", "tools.json", ".lock"]) {
      expect(bold, word).toContain(word);
    }
  });
});

describe("the chat commands' page", () => {
  it("names every command, every alias, and each spelling not mapped", () => {
    const page = readFileSync(join(MAN, "lnk-link-harness-acp.7"), "utf8").replace(/\\-/g, "-");
    for (const spec of COMMANDS) {
      expect(page, spec.name).toContain(`/${spec.name}`);
      for (const alias of spec.aliases) expect(page, alias).toContain(`/${alias}`);
    }
    for (const name of NOT_MAPPED) expect(page, name).toContain(`/${name}`);
  });
});
