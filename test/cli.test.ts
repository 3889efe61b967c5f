// The built command line as a child process: what it prints, how it exits, and what it writes.
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import fc from "fast-check";
import { z } from "zod";
import { UsageError, parseCommandLine } from "../daemon/cli.js";
import { AspState, Contract, FEATURES, Settings } from "../protocol/index.js";
import { writeSettings } from "../store/index.js";
import { BIN, MAIN, ROOT, assertBuilt } from "./fixtures/built.js";
import { Child, killAll, run, type Run } from "./fixtures/child.js";

const SECRET = "sk-SECRET-123";

let home: string;
beforeAll(() => {
  assertBuilt([BIN, "dist/daemon/cli.js", "dist/daemon/commands.js", "dist/store/settings.js"], ["daemon", "store", "protocol"]);
  home = mkdtempSync(join(tmpdir(), "lnk-cli-"));
});
// Every run waits for its process's exit (killing it when late); this is for a test that failed midway.
afterAll(async () => {
  await killAll();
  rmSync(home, { recursive: true, force: true });
});

/** A folder of its own under the test's home. */
function tempDir(): string {
  return mkdtempSync(join(home, "agent-"));
}

/** The CLI with a clean environment: no LNK_* of the machine running the tests, a Home of its own. */
function cli(args: string[], options: { input?: string; env?: Record<string, string> } = {}): Promise<Run> {
  return run(process.execPath, [MAIN, ...args], {
    input: options.input ?? "",
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, XDG_DATA_HOME: join(home, "data"), ...options.env },
    ms: 15_000,
  });
}

/** Exactly one line on stderr, of the program's own form. */
function expectOneLine(r: Run): void {
  expect(r.stderr, r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
}

const valid = { model: { provider: "openai", name: "gpt-test", base_url: "http://127.0.0.1:9/v1", key: "sk-VALID-456" } };

describe.concurrent("contract, --version, --help", () => {
  it("contract prints the Contract: version 2, one port, and what is built, each feature built as the spec says", async () => {
    const r = await cli(["contract"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    const contract = Contract.parse(JSON.parse(r.stdout));
    // Every key: a key left out means no, and the parts not built yet (sessions carried by a
    // switch) are left out.
    expect(contract).toEqual({
      version: 2,
      proxy: true,
      // It serves on stdio, a Unix socket or one port (left out, Link would give it 200).
      ports: 1,
      proof: true,
      recover: true,
      agent: true,
      shared: true,
      blank: true,
      from: true,
      tools: true,
      parts: true,
      instructions: true,
      folders: true,
      acp: true,
      prompt: true,
      conversations: true,
      chats: true,
      state: { export: ["instructions", "skills", "memory", "sessions"], import: ["sessions"] },
      session_content: ["tools", "thinking", "images", "resources"],
      notes: true,
      native_memory: false,
      identity: true,
      features: expect.any(Object),
    });
    // Every feature is built, a repository's own instructions (AGENTS.md) too.
    expect(contract.features).toEqual(Object.fromEntries(FEATURES.map((f) => [f, "spec"])));
    // Asking for the contract writes nothing.
    expect(readdirSync(home).filter((n) => !n.startsWith("agent-"))).toEqual([]);
  });

  it("--version and -V print the package's version, and exit 0", async () => {
    const pkg = z.object({ version: z.string() }).loose().parse(JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")));
    for (const flag of ["--version", "-V"]) {
      const r = await cli([flag]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toBe(`lnk-link-harness ${pkg.version}\n`);
      expect(r.stderr).toBe("");
    }
  });

  it("--help and -h print the usage of each command, and exit 0", async () => {
    for (const flag of ["--help", "-h"]) {
      const r = await cli([flag]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toBe("");
      for (const command of ["contract", "configure", "state", "usage", "--socket"]) expect(r.stdout).toContain(command);
    }
  });
});

describe.concurrent("bad input: one line on stderr, exit 2, nothing written", () => {
  const invalid: [string, string][] = [
    ["bad JSON (a bare word)", `{"model": {"provider": "p", "name": "m", "base_url": "http://x", "key": ${SECRET}}}`],
    ["bad JSON (a trailing comma)", `{"model": {"provider": "p", "name": "m", "base_url": "http://x", "key": "${SECRET}",}}`],
    ["bad JSON (cut short)", `{"model": {"provider": "p", "name": "m", "key": "${SECRET}"`],
    ["bad JSON (text after it)", `{"model": {"key": "x"}} ${SECRET}`],
    ["nothing at all", ""],
    ["JSON that is not an object", JSON.stringify(SECRET)],
    ["no model", JSON.stringify({ identity: { persona: SECRET } })],
    ["a model without its name", JSON.stringify({ model: { provider: "p", base_url: "http://x", key: SECRET } })],
    ["a wrong type", JSON.stringify({ model: { ...valid.model, name: 42, key: SECRET } })],
    ["an unknown key", JSON.stringify({ model: { ...valid.model, key: SECRET }, colour: "blue" })],
    ["an unknown key of the model", JSON.stringify({ model: { ...valid.model, key: SECRET, temperature: 0.2 } })],
    ["the secret where a URL goes", JSON.stringify({ model: { ...valid.model, base_url: SECRET } })],
    ["the secret where a choice goes", JSON.stringify({ ...valid, verbosity: SECRET })],
    ["the secret as a key given a number", JSON.stringify({ model: { ...valid.model, key: 5 }, identity: { owner: SECRET, skills: "one" } })],
  ];

  /** An agent folder holding a valid config.json, and a check that nothing of it changed. */
  function agentWithSettings(): { dir: string; unchanged: () => void } {
    const dir = tempDir();
    writeSettings({ dir }, Settings.parse(valid));
    const config = join(dir, "config.json");
    const before = { bytes: readFileSync(config), mode: statSync(config).mode, ino: statSync(config).ino, files: readdirSync(dir) };
    return {
      dir,
      unchanged: () => {
        expect(readFileSync(config).equals(before.bytes), "config.json's bytes").toBe(true);
        expect(statSync(config).mode).toBe(before.mode);
        expect(statSync(config).ino, "config.json was not replaced").toBe(before.ino);
        expect(readdirSync(dir)).toEqual(before.files);
      },
    };
  }

  it.each(invalid)("configure with %s, from stdin", async (_, text) => {
    const agent = agentWithSettings();
    const r = await cli(["configure", "--agent", agent.dir], { input: text });
    expect(r.code, r.stderr).toBe(2);
    expectOneLine(r);
    expect(r.stdout).toBe("");
    expect(r.stderr).not.toContain("SECRET");
    agent.unchanged();
  });

  it("configure with invalid settings from a FILE", async () => {
    const agent = agentWithSettings();
    const file = join(tempDir(), "settings.json");
    writeFileSync(file, JSON.stringify({ model: { ...valid.model, key: SECRET, base_url: "ftp://x" } }));
    const r = await cli(["configure", "--agent", agent.dir, file]);
    expect(r.code, r.stderr).toBe(2);
    expectOneLine(r);
    expect(r.stderr).toContain("model.base_url");
    expect(r.stdout + r.stderr).not.toContain("SECRET");
    agent.unchanged();
  });

  it("a JSON error says where, never what", async () => {
    const r = await cli(["configure", "--agent", tempDir()], { input: `{\n  "model": {\n    "key": "${SECRET}",\n  }\n}` });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/line 4, column 3/);
    expect(r.stderr).not.toContain("SECRET");
  });

  const usage: [string, (agent: string) => string[]][] = [
    ["an unknown flag", (a) => ["--bogus", "--agent", a]],
    ["an unknown flag of configure", (a) => ["configure", "--agent", a, "--bogus"]],
    ["an unknown command", (a) => ["frobnicate", "--agent", a]],
    ["a flag configure doesn't take", (a) => ["configure", "--agent", a, "--socket", join(a, "socket")]],
    ["two FILEs", (a) => ["configure", "--agent", a, join(a, "a.json"), join(a, "b.json")]],
    ["a FILE that doesn't exist", (a) => ["configure", "--agent", a, join(a, "missing.json")]],
    ["a FILE that is a folder", (a) => ["configure", "--agent", a, a]],
    ["an argument to contract", () => ["contract", "extra"]],
    ["a flag contract doesn't take", (a) => ["contract", "--agent", a]],
    ["an unknown part of state", (a) => ["state", "bogus", "--agent", a]],
    ["--agent without a value", () => ["configure", "--agent="]],
  ];
  it.each(usage)("%s", async (_, args) => {
    const agent = agentWithSettings();
    const r = await cli(args(agent.dir), { input: JSON.stringify(valid), env: { LNK_AGENT_DIR: agent.dir } });
    expect(r.code, r.stderr).toBe(2);
    expectOneLine(r);
    expect(r.stdout).toBe("");
    agent.unchanged();
  });

  const bounds: [string, string][] = [
    ["LNK_ACP_MAX_BYTES", "1023"],
    ["LNK_ACP_MAX_BYTES", "32 MiB"],
    ["LNK_ACP_UNREAD_MS", "999"],
    ["LNK_ACP_UNREAD_MS", "-5000"],
    ["LNK_ACP_UNREAD_MS", "1e9"],
    ["LNK_ACP_UNREAD_MS", "60000.5"],
    ["LNK_ACP_UNREAD_MS", "99999999999999999999"],
  ];
  it.each(bounds)("%s=%s: the daemon serves nothing", async (name, value) => {
    const agent = agentWithSettings();
    const r = await cli(["--agent", agent.dir], { input: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n`, env: { [name]: value } });
    expect(r.code, r.stderr).toBe(2);
    expectOneLine(r);
    expect(r.stderr).toContain(`${name} must be a whole number`);
    expect(r.stdout).toBe("");
    agent.unchanged();
  });

  // Root reads a file of mode 000 all the same.
  it.skipIf(process.getuid?.() === 0)("a FILE that can't be read", async () => {
    const agent = agentWithSettings();
    const file = join(tempDir(), "settings.json");
    writeFileSync(file, JSON.stringify(valid), { mode: 0o000 });
    const r = await cli(["configure", "--agent", agent.dir, file]);
    expect(r.code, r.stderr).toBe(2);
    expectOneLine(r);
    expect(r.stderr).toContain("EACCES");
    agent.unchanged();
  });

  it("a folder that can't be made is a failure other than bad input: one line, exit 1", async () => {
    const file = join(tempDir(), "a-file");
    writeFileSync(file, "");
    const r = await cli(["configure", "--agent", join(file, "agent")], { input: JSON.stringify(valid) });
    expect(r.code, r.stderr).toBe(1);
    expectOneLine(r);
    expect(r.stdout).toBe("");
  });
});

describe.concurrent("configure with valid settings", () => {
  function expectWritten(dir: string): void {
    const config = join(dir, "config.json");
    expect(statSync(config).mode & 0o777).toBe(0o600);
    expect(Settings.parse(JSON.parse(readFileSync(config, "utf8")))).toEqual(valid);
    expect(readdirSync(dir)).toEqual(["config.json"]);
  }

  it("from a FILE writes config.json, mode 0600, making the agent's folder", async () => {
    const dir = join(tempDir(), "new", "agent");
    const file = join(tempDir(), "settings.json");
    writeFileSync(file, JSON.stringify(valid));
    const r = await cli(["configure", "--agent", dir, file]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe("");
    expect(r.stderr).not.toContain("sk-VALID");
    expectWritten(dir);
  });

  it("from stdin replaces config.json whole, mode 0600 even where it was 0644", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "config.json"), JSON.stringify({ model: { ...valid.model, name: "old" } }));
    chmodSync(join(dir, "config.json"), 0o644);
    const r = await cli(["configure", "--agent", dir], { input: JSON.stringify(valid) });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe("");
    expect(r.stderr).not.toContain("sk-VALID");
    expectWritten(dir);
  });

  it("into $LNK_AGENT_DIR when no --agent is given", async () => {
    const dir = tempDir();
    const r = await cli(["configure"], { input: JSON.stringify(valid), env: { LNK_AGENT_DIR: dir } });
    expect(r.code, r.stderr).toBe(0);
    expectWritten(dir);
  });
});

describe.concurrent("state", () => {
  function expected(agent: string, files = agent) {
    return { agent, files, paths: ["config.json", "instructions", "skills", "memory", "chats"].map((p) => join(agent, p)) };
  }

  it("state --agent DIR prints the paths a move carries, and writes nothing", async () => {
    const dir = join(tempDir(), "agent");
    const r = await cli(["state", "--agent", dir]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual(expected(dir));
    expect(r.stderr).toBe("");
    expect(() => statSync(dir)).toThrow();
  });

  it("--files names the files folder", async () => {
    const dir = tempDir();
    const files = tempDir();
    const r = await cli(["state", "--agent", dir, "--files", files]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual(expected(dir, files));
  });

  it("the agent's folder is $LNK_AGENT_DIR, else under $XDG_DATA_HOME, else under ~/.local/share", async () => {
    const dir = tempDir();
    const byEnv = await cli(["state"], { env: { LNK_AGENT_DIR: dir } });
    expect(JSON.parse(byEnv.stdout)).toEqual(expected(dir));

    const data = tempDir();
    const byXdg = await cli(["state"], { env: { XDG_DATA_HOME: data } });
    expect(JSON.parse(byXdg.stdout)).toEqual(expected(join(data, "lnk-link-harness", "agent")));

    mkdirSync(join(home, "other-home"), { recursive: true });
    const byHome = await run(process.execPath, [MAIN, "state"], { env: { PATH: process.env.PATH ?? "", HOME: join(home, "other-home") }, ms: 15_000 });
    expect(JSON.parse(byHome.stdout)).toEqual(expected(join(home, "other-home", ".local", "share", "lnk-link-harness", "agent")));
  });
});

describe.concurrent("a newcomer's first commands", () => {
  /** The CLI run from a folder of its own, so anything it makes in its working folder is seen. */
  async function cliIn(cwd: string, args: string[], input = ""): Promise<Run> {
    return run(process.execPath, [MAIN, ...args], {
      cwd,
      input,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, XDG_DATA_HOME: join(home, "data") },
      ms: 15_000,
    });
  }

  it('a path that begins with "~" (no shell expanded it) is refused, saying what to write, and nothing is made', async () => {
    const cwd = tempDir();
    for (const args of [["--agent", "~/agent"], ["configure", "--agent", "~/agent"], ["configure", "--agent", join(cwd, "a"), "~/settings.json"], ["--socket", "~/agent.sock"]]) {
      const r = await cliIn(cwd, args, JSON.stringify(valid));
      expect(r.code, r.stderr).toBe(2);
      expectOneLine(r);
      expect(r.stderr).toContain('a path that begins with "~" is not expanded here');
      expect(r.stderr).toContain("$HOME/");
    }
    const env = await run(process.execPath, [MAIN], { cwd, env: { PATH: process.env.PATH ?? "", HOME: home, LNK_AGENT_DIR: "~/agent" }, ms: 15_000 });
    expect(env.stderr).toContain("LNK_AGENT_DIR");
    expect(readdirSync(cwd)).toEqual([]);
  });

  it("a mistyped option names the one meant", async () => {
    const r = await cli(["--agnet", "x"]);
    expect(r.code).toBe(2);
    expectOneLine(r);
    expect(r.stderr).toBe("lnk-link-harness: unknown option --agnet: did you mean --agent? (see --help)\n");
    expect((await cli(["--frobnicate"])).stderr).toBe("lnk-link-harness: unknown option --frobnicate (see --help)\n");
  });

  it("serving an agent that isn't there is refused at start, with the command that fixes it, and nothing is made", async () => {
    const cwd = tempDir();
    const missing = join(cwd, "no-such-agent");
    const file = join(cwd, "a-file");
    writeFileSync(file, "");
    const empty = join(cwd, "empty");
    mkdirSync(empty);
    const cases: [string, string][] = [
      [missing, `there is no agent at ${missing}: the folder does not exist; make it with its settings: lnk-link-harness configure --agent ${missing} < settings.json`],
      [file, `${file} is a file, not an agent's folder: name the folder with --agent`],
      [empty, `the agent at ${empty} has no settings yet: lnk-link-harness configure --agent ${empty} < settings.json`],
    ];
    for (const [dir, said] of cases) {
      const r = await cliIn(cwd, ["--agent", dir]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toBe(`lnk-link-harness: ${said}\n`);
    }
    expect(readdirSync(cwd).sort()).toEqual(["a-file", "empty"]);
    expect(readdirSync(empty)).toEqual([]);
  });

  it("a socket in a folder that doesn't exist, or with a path over 107 bytes, says the real cause and makes nothing", async () => {
    const agent = tempDir();
    writeSettings({ dir: agent }, valid);
    const place = tempDir();
    const inMissing = join(place, "missing", "agent.sock");
    const r1 = await cli(["--agent", agent, "--socket", inMissing]);
    expect(r1.code, r1.stderr).toBe(2);
    expect(r1.stderr).toBe(`lnk-link-harness: the folder ${join(place, "missing")} does not exist: make it first (mkdir -p ${join(place, "missing")})\n`);
    const long = join(place, `${"s".repeat(120 - place.length)}.sock`);
    const r2 = await cli(["--agent", agent, "--socket", long]);
    expect(r2.code, r2.stderr).toBe(2);
    expect(r2.stderr).toContain(`bytes long: a Unix socket's path is at most 107 bytes, so choose a shorter one`);
    expect(readdirSync(place)).toEqual([]);
  });

  it("configure with a terminal for stdin says what it reads rather than waiting", async () => {
    const dir = tempDir();
    // `script` gives the command a terminal of its own.
    const r = await run("script", ["-qec", `"${process.execPath}" "${MAIN}" configure --agent "${dir}"`, "/dev/null"], {
      env: { PATH: process.env.PATH ?? "", HOME: home },
      ms: 15_000,
    });
    expect(r.code).toBe(2);
    expect(r.stdout).toContain("stdin is a terminal: name a FILE, or pipe the JSON in");
    expect(readdirSync(dir)).toEqual([]);
  });

  it("state import with a terminal for stdin says what it reads rather than waiting", async () => {
    const dir = tempDir();
    const r = await run("script", ["-qec", `"${process.execPath}" "${MAIN}" state import --agent "${dir}"`, "/dev/null"], {
      env: { PATH: process.env.PATH ?? "", HOME: home },
      ms: 15_000,
    });
    expect(r.code).toBe(2);
    expect(r.stdout).toContain("state import reads the State as JSON from FILE or from stdin, and stdin is a terminal: name a FILE, or pipe the JSON in");
    expect(readdirSync(dir)).toEqual([]);
  });

  it("large settings on stdin are read whole, however the pipe hands them over", async () => {
    const dir = tempDir();
    const large = { model: { ...valid.model, params: { note: "n".repeat(900_000) } } };
    const r = await cli(["configure", "--agent", dir], { input: JSON.stringify(large) });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(readFileSync(join(dir, "config.json"), "utf8"))).toEqual(large);
  });

  it('a key named "api_key" is refused naming "key", never quoting it', async () => {
    const dir = tempDir();
    const r = await cli(["configure", "--agent", dir], { input: JSON.stringify({ model: { ...valid.model, key: undefined, api_key: SECRET } }) });
    expect(r.code).toBe(2);
    expectOneLine(r);
    expect(r.stderr).toContain('(the model\'s key is named "key")');
    expect(r.stderr).not.toContain(SECRET);
  });

  it("the documented install puts the command and its man pages in place", { timeout: 60_000 }, async () => {
    const prefix = tempDir();
    const install = await run("npm", ["install", "-g", "--prefix", prefix, "--no-audit", "--no-fund", ROOT], { env: { ...process.env }, ms: 50_000 });
    expect(install.code, install.stderr).toBe(0);
    const version = await run(join(prefix, "bin", "lnk-link-harness"), ["--version"], { ms: 15_000 });
    expect(version.stdout).toMatch(/^lnk-link-harness \d+\.\d+\.\d+\n$/);
    for (const [section, page] of [["1", "lnk-link-harness"], ["5", "lnk-link-harness-folder"], ["7", "lnk-link-harness-turn"], ["7", "lnk-link-harness-acp"]] as const) {
      // As a user's shell has it: the install's bin/ on the PATH, from which man finds share/man (whose
      // pages npm links to the package's own, which man names).
      const installed = join(prefix, "share", "man", `man${section}`, `${page}.${section}`);
      const found = await run("man", ["-w", section, page], { cwd: prefix, env: { PATH: `${join(prefix, "bin")}:/usr/local/bin:/usr/bin:/bin` }, ms: 15_000 });
      expect(found.stdout.trim(), found.stderr).toBe(realpathSync(installed));
      // Not found without the install on the PATH.
      const without = await run("man", ["-w", section, page], { cwd: prefix, env: { PATH: "/usr/local/bin:/usr/bin:/bin" }, ms: 15_000 });
      expect(without.code).not.toBe(0);
    }
  });
});

describe("the build", () => {
  it("is done once across the quick start: a second build with nothing changed skips, leaving dist/ as it was", () => {
    const before = statSync(join(ROOT, BIN)).mtimeMs;
    const again = spawnSync(join(ROOT, "node_modules", ".bin", "tsx"), ["scripts/build.ts"], { cwd: ROOT, encoding: "utf8", timeout: 60_000 });
    expect(again.status).toBe(0);
    expect(again.stdout).toMatch(/dist\/ is up to date with the sources/);
    expect(statSync(join(ROOT, BIN)).mtimeMs).toBe(before);
  });
});

describe("the README's way to try it without a model", () => {
  it("runs as written: the scripted model, an agent configured for it, acpx's exec answered", { timeout: 60_000 }, async () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const section = readme.slice(readme.indexOf("### Trying it without a model"));
    const blocks = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1] ?? "");
    const [start, talk] = blocks;
    expect(start).toContain("npm run model");
    // `npm run model` builds, then runs this: the build is there already.
    const model = new Child(process.execPath, [join(ROOT, "dist", "test", "model-server.js")]);
    try {
      const url = (await model.line((l) => l.startsWith("http://"))).trim();
      // The command as installed (npm install -g .), and acpx as npx finds it.
      const bin = tempDir();
      symlinkSync(MAIN, join(bin, "lnk-link-harness"));
      const script = (talk ?? "").replaceAll("http://127.0.0.1:40123/v1", url);
      const r = await run("sh", ["-ec", script], {
        cwd: ROOT,
        env: { PATH: `${bin}:${join(ROOT, "node_modules", ".bin")}:${process.env.PATH ?? ""}`, HOME: tempDir() },
        ms: 50_000,
      });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain("echo: hello");
    } finally {
      model.proc.kill();
      await model.exited;
    }
  });
});

describe("the README's way of using it", () => {
  it("runs as written, each command of it, with the scripted model standing in for Ollama", { timeout: 90_000 }, async () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const section = readme.slice(readme.indexOf("## Using it"), readme.indexOf("### Trying it without a model"));
    const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? "";
    const commands = block
      .replace(/\\\n\s*/g, "")
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith("#"));
    expect(commands.length).toBeGreaterThanOrEqual(6);
    const model = new Child(process.execPath, [join(ROOT, "dist", "test", "model-server.js")]);
    const bin = tempDir();
    const userHome = tempDir();
    symlinkSync(MAIN, join(bin, "lnk-link-harness"));
    const env = { PATH: `${bin}:${join(ROOT, "node_modules", ".bin")}:${process.env.PATH ?? ""}`, HOME: userHome };
    try {
      const url = (await model.line((l) => l.startsWith("http://"))).trim();
      for (const written of commands) {
        const command = written.replaceAll("http://127.0.0.1:11434/v1", url);
        if (command.includes("--socket")) {
          // Serves until stopped: its socket appears, of mode 0600, and it stops cleanly.
          const served = new Child("sh", ["-c", `exec ${command}`], { cwd: ROOT, env });
          const sock = join(userHome, "agent.sock");
          for (const until = Date.now() + 20_000; !existsSync(sock) && Date.now() < until; ) await new Promise((r) => setTimeout(r, 50));
          expect(statSync(sock).mode & 0o777, command).toBe(0o600);
          served.proc.kill("SIGTERM");
          expect((await served.exit()).code, command).toBe(0);
          continue;
        }
        // The stdio server answers until its input ends: here, at once.
        const serves = /^lnk-link-harness --agent "\$HOME\/agent"$/.test(command);
        const r = await run("sh", ["-ec", serves ? `${command} </dev/null` : command], { cwd: ROOT, env, ms: 50_000 });
        expect(r.code, `${written}\n${r.stderr}`).toBe(0);
        if (command.includes("acpx")) expect(r.stdout).toContain("echo: hello");
        if (command.includes("state export")) expect(AspState.parse(JSON.parse(readFileSync(join(userHome, "state.json"), "utf8")))).toEqual({ skills: [], memory: [] });
        else if (command.includes("state import")) expect(r.stdout).toBe("nothing came: the State is empty\n");
        else if (command.includes("state")) expect(r.stdout).toContain(join(userHome, "agent"));
      }
    } finally {
      model.proc.kill();
      await model.exited;
    }
  });
});

describe("the command line, fuzzed", () => {
  it("any argv is a command or one line of usage error, never another failure", () => {
    const word = fc.oneof(
      fc.constantFrom("--agent", "--agnet", "--files", "--home", "--socket", "--sokcet", "--agents", "--blank", "--port", "--prot", "--port=0", "65536", "-1", "8080", "--help", "-h", "-V", "--", "-x", "--agent=~/a", "configure", "state", "export", "import", "contract", "serve", "usage", "--since", "--since=2026-11-30", "--json", "2026-11-30T21:00Z", "instructions", "--thread", "--thread=../x"),
      fc.string({ maxLength: 12 }),
      fc.string({ maxLength: 12 }).map((s) => `~${s}`),
      fc.string({ maxLength: 12 }).map((s) => `--${s}`),
    );
    fc.assert(
      fc.property(fc.array(word, { maxLength: 6 }), fc.option(fc.string({ maxLength: 8 }).map((s) => `~${s}`), { nil: undefined }), fc.option(fc.oneof(fc.string({ maxLength: 8 }), fc.nat({ max: 99999 }).map(String)), { nil: undefined }), (argv, envDir, envPort) => {
        try {
          parseCommandLine(argv, { ...(envDir === undefined ? {} : { LNK_AGENT_DIR: envDir }), ...(envPort === undefined ? {} : { LNK_PORT: envPort }) });
        } catch (e) {
          expect(e).toBeInstanceOf(UsageError);
          expect((e as Error).message).not.toMatch(/\n/);
        }
      }),
      { numRuns: 2000 },
    );
  });
});
