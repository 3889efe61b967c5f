// The fetch an MCP tool over Streamable HTTP is reached with (daemon/tools/fetch.ts), over the wire:
// a JSON answer past its bound and an event that never ends stop being read, saying so; a long
// stream of events each in bounds is read whole, however the reads cut it; a redirect comes back
// as it is, for the SDK to judge.
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { boundedFetch, TOOL_BODY_MAX, TOOL_EVENT_MAX } from "../daemon/tools/fetch.js";

let answer: (res: ServerResponse) => void = (res) => res.end();
let server: Server;
let url = "";

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on("end", () => answer(res));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

const MIB = Buffer.alloc(1024 * 1024, "q".charCodeAt(0));
/** Writes `n` pieces made by `piece`, minding the socket's room, then ends. */
function stream(res: ServerResponse, n: number, piece: (i: number) => Buffer): void {
  let i = 0;
  const more = (): void => {
    while (i < n) if (!res.write(piece(i++))) return void res.once("drain", more);
    res.end();
  };
  more();
}

describe("a tool's answers over HTTP", { timeout: 60_000 }, () => {
  it("a JSON answer past the bound stops being read, saying so", async () => {
    answer = (res) => {
      res.writeHead(200, { "content-type": "application/json" });
      stream(res, TOOL_BODY_MAX / MIB.length + 4, () => MIB);
    };
    const res = await boundedFetch()(url, { method: "POST", body: "{}" });
    await expect(res.text()).rejects.toThrow();
    const again = await boundedFetch()(url, { method: "POST", body: "{}" });
    const reader = again.body!.getReader();
    let failed: unknown;
    try {
      for (;;) if ((await reader.read()).done) break;
    } catch (e) {
      failed = e;
    }
    expect((failed as Error).message).toBe(`the tool's answer ran past ${TOOL_BODY_MAX} bytes`);
  });

  it("an event that never ends stops being read, saying so; events each in bounds are read whole, however the reads cut them", async () => {
    answer = (res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: ");
      stream(res, TOOL_EVENT_MAX / MIB.length + 2, () => MIB);
    };
    const reader = (await boundedFetch()(url, { method: "POST", body: "{}" })).body!.getReader();
    let failed: unknown;
    try {
      for (;;) if ((await reader.read()).done) break;
    } catch (e) {
      failed = e;
    }
    expect((failed as Error).message).toBe(`the tool sent an event of over ${TOOL_EVENT_MAX} bytes with no end`);

    await fc.assert(
      fc.asyncProperty(fc.array(fc.constantFrom("\n\n", "\r\r", "\r\n\r\n"), { minLength: 40, maxLength: 40 }), fc.array(fc.integer({ min: 1, max: 1_000_000 }), { minLength: 30, maxLength: 30 }), async (ends, sizes) => {
        // Some 40 MiB in all, past both bounds, in events of 1 MiB, written in pieces of any size.
        const whole = Buffer.concat(ends.map((end) => Buffer.concat([Buffer.from("data: "), MIB, Buffer.from(end)])));
        const pieces: Buffer[] = [];
        for (let at = 0, k = 0; at < whole.length; k++) {
          const size = sizes[k % sizes.length] ?? 1;
          pieces.push(whole.subarray(at, at + size));
          at += size;
        }
        answer = (res) => {
          res.writeHead(200, { "content-type": "text/event-stream" });
          stream(res, pieces.length, (i) => pieces[i] as Buffer);
        };
        const got = Buffer.from(await (await boundedFetch()(url, { method: "POST", body: "{}" })).arrayBuffer());
        expect(got.length).toBe(whole.length);
      }),
      { numRuns: 4 },
    );
  });

  it("a redirect comes back as it is, its status and where it leads", async () => {
    answer = (res) => {
      res.writeHead(307, { location: "http://127.0.0.1:9/elsewhere" });
      res.end();
    };
    const res = await boundedFetch()(url, { method: "POST", body: "{}", redirect: "manual" });
    expect(res.status).toBe(307);
    expect(res.headers.get("location")).toBe("http://127.0.0.1:9/elsewhere");
  });
});
