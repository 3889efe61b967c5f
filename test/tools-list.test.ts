// A subagent's tool lists (tools.json): each entry names a tool (all its calls) or one call
// (`<tool>__<call>`), and a later list narrows the one in force by calls, never by matching words.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { narrowToolsList, paths, readToolsList } from "../store/index.js";

describe("a subagent's tool lists", () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  /** Keeps each list in turn, as a subagent's tasks would, and returns the list in force. */
  function narrowed(...lists: string[][]): string[] {
    const dir = mkdtempSync(join(tmpdir(), "lnk-narrow-"));
    dirs.push(dir);
    const conv = paths({ dir }).conversation("sub");
    let now: string[] = [];
    for (const list of lists) now = narrowToolsList(conv, list);
    expect(readToolsList(conv)).toEqual(now);
    return now;
  }

  it("narrow by calls, whether an entry names a tool or a call, in either order", () => {
    expect(narrowed(["memory"], ["memory__search"])).toEqual(["memory__search"]);
    expect(narrowed(["memory__search"], ["memory"])).toEqual(["memory__search"]);
    expect(narrowed(["memory__search", "fs"], ["fs__read", "memory"])).toEqual(["memory__search", "fs__read"]);
    expect(narrowed(["memory", "fs"], ["fs", "web"])).toEqual(["fs"]);
    expect(narrowed(["memory"], ["memory__search", "memory__read"], ["memory"])).toEqual(["memory__search", "memory__read"]);
  });

  it("never widen, and empty only when nothing is in both", () => {
    expect(narrowed(["memory__search"], ["memory__read"])).toEqual([]);
    expect(narrowed(["memory__search"], ["memory__search", "fs"])).toEqual(["memory__search"]);
    expect(narrowed(["memory"], ["fs"], ["memory", "fs"])).toEqual([]);
    expect(narrowed(["fs__read"], ["fs__read__more"])).toEqual([]);
  });

  it("keep the first list as given, but once each name", () => {
    expect(narrowed(["fs", "memory__search", "fs"])).toEqual(["fs", "memory__search"]);
  });
});
