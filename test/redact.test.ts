// What counts as a secret, and how it is taken out of a provider's or a tool's words.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { envSecrets, RedactedStream, Redactor, redactor, REDACTED, settingsSecrets, sourceSecrets } from "../turn/redact.js";

describe("secrets", () => {
  it("of the environment: variables named as secrets, and credentials of the URLs any variable holds", () => {
    const env = {
      LNK_KEY: "lnk-key-0123456789",
      LNK_MODEL_KEY: "sk-model-0123456789",
      GITHUB_TOKEN: "ghp_0123456789abcdef",
      DB_PASSWORD: "correct-horse-battery",
      X_API_KEY_FILE_SECRET: "s3cr3t-value",
      apiKey: "camel-case-value",
      LNK_TOOL_WEB: "https://bot:web-pass-0123@tools.example/mcp?access_token=tok-in-query&page=2",
      LNK_MEMORY: "node memory.js",
      npm_package_keywords_0: "harness-protocol",
      PWD: "/home/someone/work",
      SSH_AUTH_SOCK: "/tmp/ssh-agent.sock",
      SHORT_TOKEN: "1234",
    };
    const found = envSecrets(env);
    for (const s of ["lnk-key-0123456789", "sk-model-0123456789", "ghp_0123456789abcdef", "correct-horse-battery", "s3cr3t-value", "camel-case-value", "web-pass-0123", "tok-in-query"]) {
      expect(found).toContain(s);
    }
    for (const s of ["harness-protocol", "/home/someone/work", "/tmp/ssh-agent.sock", "node memory.js", "2"]) expect(found).not.toContain(s);
    // Found, but too short to take out without mangling the text around it.
    expect(new Redactor(found).redact("code 1234 and ghp_0123456789abcdef")).toBe(`code 1234 and ${REDACTED}`);
  });

  it("of an environment that changes, looked for again each time; of a frozen one, found once", () => {
    const env: NodeJS.ProcessEnv = { LNK_MODEL_KEY: "sk-model-first-0123" };
    expect(envSecrets(env)).toEqual(["sk-model-first-0123"]);
    env.LNK_MODEL_KEY = "sk-model-second-0123";
    env.GITHUB_TOKEN = "ghp_added-later-0123";
    expect(envSecrets(env)).toEqual(["sk-model-second-0123", "ghp_added-later-0123"]);
    const frozen = Object.freeze({ ...env });
    const found = envSecrets(frozen);
    expect(found).toEqual(["sk-model-second-0123", "ghp_added-later-0123"]);
    expect(envSecrets(frozen)).toBe(found);
    expect(Object.isFrozen(found)).toBe(true);
    // Another frozen environment, of other values, is its own.
    expect(envSecrets(Object.freeze({ LNK_KEY: "lnk-key-other-0123" }))).toEqual(["lnk-key-other-0123"]);
  });

  it("of the settings and of a tool's source: the key, URL credentials, secret headers, variables and flags", () => {
    const settings = {
      model: { provider: "p", name: "m", base_url: "https://u:base-url-pass@llm.example/v1", key: "Bearer sk-settings-0123" },
      tools: { web: "https://t:tools-url-pass@web.example/mcp" },
    };
    expect(settingsSecrets(settings)).toEqual(expect.arrayContaining(["base-url-pass", "tools-url-pass", "Bearer sk-settings-0123", "sk-settings-0123"]));
    expect(sourceSecrets({ type: "http", url: "https://x.example/mcp", headers: { Authorization: "Bearer hdr-token-0123", Accept: "application/json" } })).toEqual([
      "Bearer hdr-token-0123",
      "hdr-token-0123",
    ]);
    const stdio = sourceSecrets({
      type: "stdio",
      command: "tool",
      args: ["--api-key=flag-secret-0123", "--token", "next-arg-secret", "--verbose", "plain-argument"],
      env: { SERVICE_SECRET: "env-secret-0123", HOME: "/home/someone" },
    });
    expect(stdio).toEqual(expect.arrayContaining(["flag-secret-0123", "next-arg-secret", "env-secret-0123"]));
    expect(stdio).not.toContain("plain-argument");
    expect(stdio).not.toContain("/home/someone");
  });
});

describe("a redactor", () => {
  it("takes out each secret as given, inside a URL and inside a JSON string, the longest first", () => {
    const r = redactor(['sk-"quoted"/key+0123', "abcdefgh", "abcdefgh-longer"]);
    const text = `a sk-"quoted"/key+0123 b ${encodeURIComponent('sk-"quoted"/key+0123')} c ${JSON.stringify('sk-"quoted"/key+0123')} d abcdefgh-longer e abcdefgh`;
    expect(r.redact(text)).toBe(`a ${REDACTED} b ${REDACTED} c "${REDACTED}" d ${REDACTED} e ${REDACTED}`);
    expect(r.redactValue({ why: ["x abcdefgh"], n: 1 })).toEqual({ why: [`x ${REDACTED}`], n: 1 });
  });

  it("with no secret leaves the text alone, and characters of a pattern are taken as they are", () => {
    expect(redactor([]).redact("nothing (.*) to take out")).toBe("nothing (.*) to take out");
    expect(redactor(["a.b*c+d?(e)"]).redact("xa.b*c+d?(e)y aXbbbcd")).toBe(`x${REDACTED}y aXbbbcd`);
  });
});

describe("text streamed in pieces", () => {
  /** The pieces handed on for `text` cut at `cuts`, and what was held after each piece. */
  function streamed(r: Redactor, text: string, cuts: number[]): { out: string[]; after: string[] } {
    const out: string[] = [];
    const after: string[] = [];
    const s = new RedactedStream(r, (t) => out.push(t));
    const at = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
    [0, ...at].forEach((from, i) => {
      s.push(text.slice(from, at[i] ?? text.length));
      after.push(out.join(""));
    });
    s.flush();
    return { out, after };
  }

  it("is handed on as the whole text is redacted, however it is cut, a secret split across pieces included", () => {
    // Few letters, so secrets overlap, hold one another and begin like the text around them.
    const letters = fc.string({ unit: fc.constantFrom("a", "b", "c", "d", "-", "é", "😀"), maxLength: 30 });
    const secret = fc.string({ unit: fc.constantFrom("a", "b", "c", "d", "-"), minLength: 8, maxLength: 14 });
    fc.assert(
      fc.property(fc.array(secret, { minLength: 1, maxLength: 3 }), fc.array(fc.tuple(letters, fc.nat({ max: 3 })), { maxLength: 6 }), fc.array(fc.nat(), { maxLength: 12 }), (secrets, parts, cuts) => {
        const r = new Redactor(secrets);
        const text = parts.map(([t, k]) => t + (secrets[k % secrets.length] ?? "")).join("");
        const { out, after } = streamed(r, text, cuts);
        expect(out.join("")).toBe(r.redact(text));
        for (const piece of out) for (const s of secrets) expect(piece).not.toContain(s);
        // Nothing handed on ends between the two halves of a character.
        for (const sofar of after) expect(/[\ud800-\udbff]$/.test(sofar)).toBe(false);
      }),
      { numRuns: 3_000 },
    );
  });

  it("goes on at once where it could not begin a secret; with none, each piece as it came", () => {
    const r = new Redactor(["sk-live-0123456789"]);
    const out: string[] = [];
    const s = new RedactedStream(r, (t) => out.push(t));
    s.push("Hello, world. ");
    expect(out).toEqual(["Hello, world. "]);
    s.push("Your key: sk-li");
    expect(out).toEqual(["Hello, world. ", "Your key: "]);
    s.push("ve-0123456789 and sk");
    expect(out.join("")).toBe(`Hello, world. Your key: ${REDACTED} and `);
    s.push("y is blue");
    s.flush();
    expect(out.join("")).toBe(`Hello, world. Your key: ${REDACTED} and sky is blue`);
    const none: string[] = [];
    const plain = new RedactedStream(new Redactor([]), (t) => none.push(t));
    for (const p of ["sk-li", "ve-0", ""]) plain.push(p);
    expect(none).toEqual(["sk-li", "ve-0", ""]);
  });
});
