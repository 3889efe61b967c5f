// The daemon's front: `initialize` answered before the rest is loaded, the same answer the ACP SDK's
// handler gives, and nothing lost around it.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { z } from "zod";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROTOCOL_VERSION, initializeResult } from "../acp/initialize.js";
import { front } from "../daemon/front.js";
import { version } from "../daemon/version.js";
import { writeSettings } from "../store/index.js";
import { assertBuilt, BIN, MAIN } from "./fixtures/built.js";
import { Child, run } from "./fixtures/child.js";

let dir: string;

beforeAll(() => {
  assertBuilt([BIN, "dist/daemon/front.js", "dist/daemon/agent.js"], ["daemon", "acp"]);
  dir = mkdtempSync(join(tmpdir(), "lh-front-"));
  // An agent the daemon will serve: settings of its own (its model is never asked here).
  writeSettings({ dir }, { model: { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1" } });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const line = (o: unknown) => `${JSON.stringify(o)}\n`;
const init = (id: number | string, params: unknown = { protocolVersion: 1 }) => line({ jsonrpc: "2.0", id, method: "initialize", params });

function answers(stdout: string): Record<string, unknown>[] {
  return stdout
    .split("\n")
    .filter(Boolean)
    .map((l) => z.record(z.string(), z.unknown()).parse(JSON.parse(l)));
}

describe("the front", () => {
  it("speaks the SDK's protocol version", () => {
    expect(PROTOCOL_VERSION).toBe(acp.PROTOCOL_VERSION);
  });

  it("answers initialize once, as the SDK's handler does, and the requests sent with it in one write", async () => {
    // A client that doesn't wait for the answer: both lines in one write, then its input ends.
    const r = await run(process.execPath, [MAIN, "--agent", dir], {
      input: init(7) + line({ jsonrpc: "2.0", id: 8, method: "session/list", params: {} }),
    });
    expect(r.code).toBe(0);
    const got = answers(r.stdout);
    expect(got).toHaveLength(2);
    expect(got[0]).toEqual({ jsonrpc: "2.0", id: 7, result: initializeResult(version()) });
    expect(got[1]).toEqual({ jsonrpc: "2.0", id: 8, result: { sessions: [] } });
  });

  it("leaves an initialize it can't vouch for to the SDK, which refuses it", async () => {
    const r = await run(process.execPath, [MAIN, "--agent", dir], { input: init("x", { protocolVersion: "one" }) });
    const got = answers(r.stdout);
    expect(got).toHaveLength(1);
    expect(got[0]).toMatchObject({ id: "x", error: { code: -32602 } });
  });

  it("answers a second initialize through the SDK, and a request before any initialize -32600", async () => {
    const r = await run(process.execPath, [MAIN, "--agent", dir], {
      input: line({ jsonrpc: "2.0", id: 1, method: "session/list", params: {} }) + init(2) + init(3),
    });
    const got = answers(r.stdout);
    expect(got.find((a) => a.id === 1)).toMatchObject({ error: { code: -32600 } });
    expect(got.find((a) => a.id === 2)).toMatchObject({ result: { protocolVersion: 1 } });
    expect(got.find((a) => a.id === 3)).toMatchObject({ result: { protocolVersion: 1 } });
  });

  it("holds what follows an initialize that isn't the first line until it is answered, as the SDK needs", { timeout: 30_000 }, async () => {
    // A blank line, or a notification, first: the initialize after it is the SDK's to answer, and the
    // request sent with it in the same write must not reach the SDK before that answer.
    const list = line({ jsonrpc: "2.0", id: 9, method: "session/list", params: {} });
    const cancel = line({ jsonrpc: "2.0", method: "session/cancel", params: { sessionId: "none" } });
    // And initializes the SDK answers under id null (an id that is no whole number, or no "2.0"): never
    // waited for under their own id.
    const oddIds = [
      line({ jsonrpc: "2.0", id: 1.5, method: "initialize", params: { protocolVersion: 1 } }),
      line({ jsonrpc: "1.0", id: 3, method: "initialize", params: { protocolVersion: 1 } }),
    ];
    for (const before of ["\n", cancel, ...oddIds]) {
      const r = await run(process.execPath, [MAIN, "--agent", dir], { input: before + init(8) + list });
      expect(r.code).toBe(0);
      const got = answers(r.stdout);
      expect(got.filter((a) => a.id === 8)).toEqual([{ jsonrpc: "2.0", id: 8, result: initializeResult(version()) }]);
      expect(got.filter((a) => a.id === 9)).toEqual([{ jsonrpc: "2.0", id: 9, result: { sessions: [] } }]);
    }
  });

  it("owes a client that uses one id twice, then closes its input, both answers", { timeout: 30_000 }, async () => {
    // The prompt's answer comes late (its model can't be reached), the list's at once: the list's
    // answer, under the same id, is not the prompt's, and the daemon waits for that one too. An
    // agent of its own: the turn leaves a conversation behind.
    const own = mkdtempSync(join(tmpdir(), "lh-front-twice-"));
    writeSettings({ dir: own }, { model: { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1" } });
    const r = await run(process.execPath, [MAIN, "--agent", own], {
      input:
        init(1) +
        line({ jsonrpc: "2.0", id: 2, method: "session/new", params: { cwd: own, mcpServers: [], _meta: { link: { thread: "twice" } } } }) +
        line({ jsonrpc: "2.0", id: 3, method: "session/prompt", params: { sessionId: "twice", prompt: [{ type: "text", text: "hi" }] } }) +
        line({ jsonrpc: "2.0", id: 3, method: "session/list", params: {} }),
    }).finally(() => rmSync(own, { recursive: true, force: true }));
    expect(r.code).toBe(0);
    const got = answers(r.stdout).filter((a) => a.id === 3);
    expect(got).toHaveLength(2);
    expect(got).toEqual(expect.arrayContaining([expect.objectContaining({ result: expect.objectContaining({ sessions: expect.any(Array) }) }), expect.objectContaining({ error: expect.objectContaining({ message: expect.stringMatching(/cannot reach the model/) }) })]));
  });

  it("owes a client that closes its input every answer, its requests led or ended by what the SDK trims and JSON does not", { timeout: 30_000 }, async () => {
    // A form feed, a vertical tab, a no-break space, a byte order mark, U+3000 and U+2028: the SDK
    // reads each such line as the request it holds, so the front must count it as one it owes.
    const own = mkdtempSync(join(tmpdir(), "lh-front-trim-"));
    writeSettings({ dir: own }, { model: { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1" } });
    const leads = ["\f", "\v", "\u00a0", "\ufeff", "\u3000", "\u2028"];
    const prompts = leads.map((lead, i) => `${lead}${JSON.stringify({ jsonrpc: "2.0", id: 10 + i, method: "session/prompt", params: { sessionId: "trimmed", prompt: [{ type: "text", text: `hi ${i}` }] } })}${lead}\n`);
    const r = await run(process.execPath, [MAIN, "--agent", own], {
      input: init(1) + line({ jsonrpc: "2.0", id: 2, method: "session/new", params: { cwd: own, mcpServers: [], _meta: { link: { thread: "trimmed" } } } }) + prompts.join(""),
    }).finally(() => rmSync(own, { recursive: true, force: true }));
    expect(r.code).toBe(0);
    const got = answers(r.stdout);
    for (const i of leads.keys()) expect(got.filter((a) => a.id === 10 + i)).toEqual([expect.objectContaining({ error: expect.objectContaining({ message: expect.stringMatching(/cannot reach the model/) }) })]);
  });

  it("refuses a line whose bytes are not UTF-8 text -32600, under its id when it has one, and serves the next; never reads it with U+FFFD for the bytes", async () => {
    const d = new Child(process.execPath, [MAIN, "--agent", dir]);
    d.proc.stdin.write(init(1));
    await d.line((l) => l.includes('"id":1'));
    const bad = (head: string, tail: string, bytes: number[]) => Buffer.concat([Buffer.from(head), Buffer.from(bytes), Buffer.from(tail)]);
    // A lone continuation byte, an overlong encoding of "/", a surrogate's encoding, a byte UTF-8 never uses.
    d.proc.stdin.write(bad('{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/tmp', '","mcpServers":[]}}\n', [0x80]));
    d.proc.stdin.write(bad('{"jsonrpc":"2.0","id":3,"method":"session/list","params":{"cwd":"', '"}}\n', [0xc0, 0xaf]));
    d.proc.stdin.write(bad('{"jsonrpc":"2.0","id":4,"method":"session/list","params":{"x":"', '"}}\n', [0xed, 0xa0, 0x80]));
    d.proc.stdin.write(bad('{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"', '"}}\n', [0xff]));
    d.proc.stdin.write(line({ jsonrpc: "2.0", id: 5, method: "session/list", params: {} }));
    await d.line((l) => l.includes('"id":5'));
    d.proc.stdin.end();
    expect((await d.exit()).code).toBe(0);
    const got = answers(d.stdout);
    for (const id of [2, 3, 4]) expect(got.filter((a) => a.id === id), String(id)).toEqual([expect.objectContaining({ error: expect.objectContaining({ code: -32600, message: expect.stringContaining("not UTF-8 text") }) })]);
    expect(got.filter((a) => a.id === null)).toEqual([expect.objectContaining({ error: expect.objectContaining({ code: -32600 }) })]);
    expect(got.filter((a) => a.id === 5)).toEqual([{ jsonrpc: "2.0", id: 5, result: { sessions: [] } }]);
  });

  it("answers an initialize that comes in pieces, once", async () => {
    const d = new Child(process.execPath, [MAIN, "--agent", dir]);
    const whole = init(4);
    d.proc.stdin.write(whole.slice(0, 10));
    await new Promise((resolve) => setTimeout(resolve, 50));
    d.proc.stdin.write(whole.slice(10, 30));
    await new Promise((resolve) => setTimeout(resolve, 50));
    d.proc.stdin.write(whole.slice(30) + line({ jsonrpc: "2.0", id: 5, method: "session/list", params: {} }));
    d.proc.stdin.end();
    const r = await d.exit();
    expect(r.code).toBe(0);
    const got = answers(d.stdout);
    expect(got).toEqual([
      { jsonrpc: "2.0", id: 4, result: initializeResult(version()) },
      { jsonrpc: "2.0", id: 5, result: { sessions: [] } },
    ]);
  });

  it("leaves an initialize over the message bound to be refused as oversized, never answered ahead", async () => {
    const big = line({ jsonrpc: "2.0", id: 6, method: "initialize", params: { protocolVersion: 1, _meta: { pad: "x".repeat(2000) } } });
    const r = await run(process.execPath, [MAIN, "--agent", dir], { input: big + init(7), env: { ...process.env, LNK_ACP_MAX_BYTES: "1024" } });
    expect(r.code).toBe(0);
    const got = answers(r.stdout);
    expect(got.filter((a) => a.id === 6)).toEqual([expect.objectContaining({ error: expect.objectContaining({ code: expect.any(Number) }) })]);
    expect(got.filter((a) => a.id === 7)).toEqual([{ jsonrpc: "2.0", id: 7, result: initializeResult(version()) }]);
  });

  it("answers while the input stays open, and a session made after it works", async () => {
    const d = new Child(process.execPath, [MAIN, "--agent", dir]);
    d.proc.stdin.write(init(1));
    await d.line((l) => l.includes('"id":1'));
    d.proc.stdin.write(line({ jsonrpc: "2.0", id: 2, method: "session/new", params: { cwd: dir, mcpServers: [] } }));
    const made = await d.line((l) => l.includes('"id":2'));
    expect(JSON.parse(made)).toMatchObject({ result: { sessionId: expect.any(String) } });
    d.proc.stdin.end();
    expect((await d.exit()).code).toBe(0);
  });

  describe("its lines, read off the Node stream", () => {
    /** A front over a fresh input, its first line read ahead, and what it hands on, read line by line. */
    // No initialize: the lines after one wait for the SDK's answer to it, and no SDK answers here.
    const first = line({ jsonrpc: "2.0", method: "first" });
    const over = (max = 1024 * 1024) => {
      const input = new PassThrough();
      const output = new PassThrough();
      output.resume();
      const c = front(input, output, () => Writable.toWeb(output), version(), max);
      const reader = c.input.getReader();
      const decoder = new TextDecoder();
      const next = async () => {
        const read = await reader.read();
        return read.done ? undefined : decoder.decode(read.value);
      };
      return { input, next };
    };

    it("hands on each line whole and in order, however the bytes come, and the last unended one at the end", async () => {
      const { input, next } = over();
      const a = line({ jsonrpc: "2.0", method: "a", params: { text: "é".repeat(50) } });
      const b = line({ jsonrpc: "2.0", method: "b" });
      const c = JSON.stringify({ jsonrpc: "2.0", method: "c" });
      input.write(first);
      // A line in many writes, one cut inside a character; two lines and a piece of a third in one.
      const bytes = Buffer.from(a + b + c);
      const inside = bytes.indexOf(Buffer.from("é")) + 1;
      const cuts = [0, 7, inside, inside + 1, bytes.length - 10, bytes.length];
      for (let i = 1; i < cuts.length; i++) input.write(bytes.subarray(cuts[i - 1], cuts[i]));
      input.end();
      expect(await next()).toBe(first);
      expect(await next()).toBe(a);
      expect(await next()).toBe(b);
      expect(await next()).toBe(c);
      expect(await next()).toBeUndefined();
    });

    it("reads the stream no further while a line it split waits to be taken", async () => {
      const { input, next } = over();
      input.write(first + line({ jsonrpc: "2.0", method: "a" }) + line({ jsonrpc: "2.0", method: "b" }));
      expect(await next()).toBe(first);
      expect(await next()).toContain('"a"');
      // Split already, the second waits: the stream is paused, its next bytes left in it.
      input.write(line({ jsonrpc: "2.0", method: "c" }));
      await new Promise((resolve) => setImmediate(resolve));
      expect(input.isPaused()).toBe(true);
      expect(input.readableLength).toBeGreaterThan(0);
      expect(await next()).toContain('"b"');
      expect(await next()).toContain('"c"');
    });

    it("bounds a line that comes in pieces, and goes on with the next", async () => {
      const { input, next } = over(200);
      input.write(first);
      input.write(`{"jsonrpc":"2.0","id":5,"method":"x","params":{"t":"`);
      for (let i = 0; i < 10; i++) input.write("y".repeat(100));
      input.write(`"}}\n${line({ jsonrpc: "2.0", method: "after" })}`);
      expect(await next()).toBe(first);
      expect(JSON.parse((await next()) ?? "")).toMatchObject({ id: 5, method: "_link/oversized" });
      expect(await next()).toContain('"after"');
    });

    it("ends with the stream's error, and with a stream destroyed without one", async () => {
      const failing = over();
      failing.input.write(first);
      expect(await failing.next()).toBe(first);
      const pending = failing.next();
      failing.input.destroy(new Error("the connection broke"));
      await expect(pending).rejects.toThrow("the connection broke");

      const cut = over();
      cut.input.write(first + '{"jsonrpc":"2.0","method":"half"}');
      expect(await cut.next()).toBe(first);
      cut.input.destroy();
      expect(await cut.next()).toBe('{"jsonrpc":"2.0","method":"half"}');
      expect(await cut.next()).toBeUndefined();
    });
  });

  describe("its message sink", () => {
    /** A client's end that takes `delay` ms over each write, with room for `room` bytes: a slow reader. */
    function slowClient(room: number, delay: number) {
      const writes: string[] = [];
      const output = new Writable({
        highWaterMark: room,
        writev(chunks, done) {
          writes.push(chunks.map((c) => String(c.chunk)).join(""));
          setTimeout(done, delay);
        },
      });
      return { output, writes };
    }
    const opened = (output: Writable) => {
      const input = new PassThrough();
      const c = front(input, output, () => Writable.toWeb(output), version(), 1024 * 1024);
      input.write(init(1));
      return c;
    };
    const note = (n: number) => ({ jsonrpc: "2.0", method: "session/update", params: { sessionId: "s", n } });

    /** A front over fresh Node streams, its output taken and dropped, and what it hands on read (readAll). */
    const reading = () => {
      const input = new PassThrough();
      const output = new PassThrough();
      output.resume();
      const c = front(input, output, () => Writable.toWeb(output), version(), 1024 * 1024);
      const reader = c.input.getReader();
      /** A read under way, which a wait that went idle leaves to the next. */
      let pending: ReturnType<typeof reader.read> | undefined;
      /** The messages handed on until none comes for a while. */
      const readAll = async (): Promise<unknown[]> => {
        const got: unknown[] = [];
        for (;;) {
          pending ??= reader.read();
          const r = await Promise.race([pending, new Promise<"idle">((resolve) => setTimeout(() => resolve("idle"), 300))]);
          if (r === "idle" || r.done) return got;
          pending = undefined;
          got.push(JSON.parse(new TextDecoder().decode(r.value)));
        }
      };
      return { input, c, readAll };
    };

    it("sends whole messages in order to a client that reads slowly, each answer told once it left, and the SDK's initialize answer left out", async () => {
      const { output, writes } = slowClient(64, 1);
      const c = opened(output);
      await c.first;
      const told: number[] = [];
      await c.send.write({ jsonrpc: "2.0", id: 1, result: initializeResult(version()) }, () => told.push(1));
      // One at a time, as the SDK sends: each waits for room once the client's end is full.
      let held = 0;
      for (let n = 0; n < 200; n++) {
        await c.send.write(note(n));
        held = Math.max(held, output.writableLength);
      }
      // What waits for the client is bounded by its room (and a message), not by how much was sent.
      expect(held).toBeLessThan(64 + 2 * line(note(199)).length);
      await c.send.write({ jsonrpc: "2.0", id: 2, result: { stopReason: "end_turn" } }, () => told.push(2));
      await new Promise<void>((resolve) => output.end(resolve));
      const got = answers(writes.join(""));
      expect(got[0]).toEqual({ jsonrpc: "2.0", id: 1, result: initializeResult(version()) });
      expect(got.slice(1, 201)).toEqual(Array.from({ length: 200 }, (_, n) => note(n)));
      expect(got.slice(201)).toEqual([{ jsonrpc: "2.0", id: 2, result: { stopReason: "end_turn" } }]);
      expect(told).toEqual([2]);
    });

    it("writes a line of the SDK's own, sent while a long message goes out in pieces, after it, never between its pieces", async () => {
      const { output, writes } = slowClient(64 * 1024, 1);
      const c = opened(output);
      await c.first;
      await c.send.write({ jsonrpc: "2.0", id: 1, result: initializeResult(version()) });
      const long = { jsonrpc: "2.0", method: "session/update", params: { sessionId: "s", text: "x".repeat(3 * 1024 * 1024) } };
      const refusal = line({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error" } });
      const writer = c.output.getWriter();
      const sent = c.send.write(long);
      // The SDK's refusals of lines it can't read go by the byte path, as the long message is under way.
      await Promise.all([sent, ...Array.from({ length: 5 }, () => writer.write(new TextEncoder().encode(refusal)))]);
      await writer.close();
      await new Promise((resolve) => setTimeout(resolve, 50));
      const got = answers(writes.join(""));
      expect(got).toHaveLength(7);
      expect(got[1]).toEqual(long);
      for (const e of got.slice(2)) expect(e).toMatchObject({ error: { code: -32700 } });
    });

    it("reads no more than 256 requests ahead of their answers: one more once one is answered", async () => {
      const { input, c, readAll } = reading();
      input.write(init(1));
      for (let i = 0; i < 300; i++) input.write(line({ jsonrpc: "2.0", id: 100 + i, method: "session/list", params: {} }));
      await c.first;
      expect(await readAll()).toHaveLength(1);
      await c.send.write({ jsonrpc: "2.0", id: 1, result: initializeResult(version()) });
      expect(await readAll()).toHaveLength(256);
      await c.send.write({ jsonrpc: "2.0", id: 100, result: { sessions: [] } });
      expect(await readAll()).toHaveLength(1);
      input.destroy();
    });

    it("past 256 requests read ahead of their answers, still hands on a notification (a client's cancel of the turns it filled them with), the next request held", async () => {
      const { input, c, readAll } = reading();
      input.write(init(1));
      for (let i = 0; i < 256; i++) input.write(line({ jsonrpc: "2.0", id: 100 + i, method: "session/prompt", params: { sessionId: "s", prompt: [] } }));
      const cancel = { jsonrpc: "2.0", method: "session/cancel", params: { sessionId: "s" } };
      input.write(line(cancel) + line({ jsonrpc: "2.0", id: 999, method: "session/list", params: {} }) + line(cancel));
      await c.first;
      expect(await readAll()).toHaveLength(1);
      await c.send.write({ jsonrpc: "2.0", id: 1, result: initializeResult(version()) });
      const read = await readAll();
      // The 256 prompts, then the cancel; the request after it waits for room, and the second cancel behind it.
      expect(read).toHaveLength(257);
      expect(read.at(-1)).toEqual(cancel);
      await c.send.write({ jsonrpc: "2.0", id: 100, result: { stopReason: "cancelled" } });
      expect(await readAll()).toEqual([expect.objectContaining({ id: 999 }), cancel]);
      input.destroy();
    });

    it("sends the messages of one pass of the event loop in one write", async () => {
      const { output, writes } = slowClient(1024 * 1024, 0);
      const c = opened(output);
      await c.first;
      const before = writes.length;
      await Promise.all(Array.from({ length: 10 }, (_, n) => c.send.write(note(n))));
      await new Promise((resolve) => setImmediate(resolve));
      expect(writes.slice(before)).toEqual([Array.from({ length: 10 }, (_, n) => line(note(n))).join("")]);
    });

    it("refuses a message once the client's end is closed, rather than waiting for room that never comes", async () => {
      const { output } = slowClient(16, 1);
      const c = opened(output);
      await c.first;
      output.destroy();
      await expect(c.send.write(note(0))).rejects.toThrow(/closed/);
    });

    it("keeps a client that takes a long message slowly, and closes one that takes nothing for the time allowed", async () => {
      /** A client's end that takes `rate` bytes a second, with room for 64 KiB, up to `upTo` bytes: then nothing more. */
      const client = (rate: number, upTo = Infinity) => {
        const writes: string[] = [];
        let taken = 0;
        const output = new Writable({
          highWaterMark: 64 * 1024,
          writev(chunks, done) {
            const text = chunks.map((c) => String(c.chunk)).join("");
            writes.push(text);
            taken += Buffer.byteLength(text);
            if (taken <= upTo) setTimeout(done, (Buffer.byteLength(text) / rate) * 1000);
          },
        });
        return { output, writes };
      };
      const open = (output: Writable) => {
        const input = new PassThrough();
        const c = front(input, output, () => Writable.toWeb(output), version(), 1024 * 1024, 500);
        input.write(init(1));
        return c;
      };
      // 2 MiB at 1 MiB a second: two seconds, four times the 500 ms allowed, never half a second without a piece taken.
      const long = { jsonrpc: "2.0", method: "session/update", params: { sessionId: "s", text: "x".repeat(2 * 1024 * 1024) } };
      const slow = client(1024 * 1024);
      const c = open(slow.output);
      await c.first;
      await c.send.write({ jsonrpc: "2.0", id: 1, result: initializeResult(version()) });
      await c.send.write(long);
      await c.send.write(note(1));
      await new Promise<void>((resolve) => slow.output.end(resolve));
      expect(answers(slow.writes.join(""))).toEqual([{ jsonrpc: "2.0", id: 1, result: initializeResult(version()) }, long, note(1)]);

      // One that takes the initialize answer, then nothing.
      const none = client(1024 * 1024, 1024);
      const d = open(none.output);
      await d.first;
      await d.send.write({ jsonrpc: "2.0", id: 1, result: initializeResult(version()) });
      const began = performance.now();
      await expect(d.send.write(long)).rejects.toThrow(/read none of its output for 500 ms/);
      // A hang detector only: it is closed once the time allowed is over, not before.
      expect(performance.now() - began).toBeGreaterThanOrEqual(490);
      expect(none.output.destroyed).toBe(true);
    });
  });
});
