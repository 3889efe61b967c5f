// What a turn offers the model of its tools' calls, as every provider takes a function: each named
// <tool>__<call> in letters, digits, `_` and `-`, at most 64 characters; at most 128 calls in all;
// each described in at most 8,192 characters, its arguments' schema at most 64 KiB as JSON. A tool's
// list comes from a server outside the harness: a call named past 64 characters, a list of
// thousands, a schema of megabytes would otherwise have the provider refuse every request (OpenAI's
// API takes a name of at most 64 characters and at most 128 functions), or fill the window, at every
// turn while that tool is set. What is offered is the same for the same lists, turn after turn, so
// the provider's cache holds.
import { createHash } from "node:crypto";
import { z } from "zod";
import { nestsWithin } from "../../protocol/index.js";
import { cutDescription, TOOL_SEPARATOR } from "../../turn/tools.js";
import { wellFormed, wellFormedJson } from "../../turn/wellformed.js";
import type { ListedCall } from "./session.js";

/** The longest name a call is offered under: OpenAI's API, and the others after it, take no longer. */
export const CALL_NAME_MAX = 64;
/** The most calls one request offers: OpenAI's API takes no more (others take more, none fewer). */
export const OFFERED_MAX = 128;
/** A call's description is offered up to this many characters, then cut. */
export const DESCRIPTION_MAX = 8_192;
/** A call whose arguments' schema is longer than this as JSON (in characters) is not offered: a schema can't be cut. */
export const PARAMETERS_MAX = 64 * 1024;
/**
 * A call whose arguments' schema nests deeper than this in arrays and objects is not offered: a schema
 * thousands deep can't be written as JSON (the stack runs out), and would drop the tool's whole list.
 * As deep as the arguments a call may be sent (protocol's THINKING_DEPTH_MAX) and twice more: each of
 * their levels is two of a schema's (`properties`, then the field).
 */
export const PARAMETERS_DEPTH_MAX = 128;
/** The most calls kept of one tool's list: its pages past them are not asked for. */
export const LISTED_MAX = 1_024;
/** The most characters of one tool's list kept (names, descriptions as cut, schemas): past them it is read no further. */
export const LISTED_CHARS_MAX = 4 * 1024 * 1024;
/** A call whose own name is longer than this is not offered (MCP asks for at most 128 characters). */
export const CALL_NAME_LISTED_MAX = 1_024;

/** A call's arguments' schema, as the MCP SDK took it: a JSON object. */
const Schema = z.record(z.string(), z.unknown());

/** The length of `{}`, the schema a call unfit to be offered is kept with, as JSON. */
const EMPTY_SCHEMA = 2;
/** The hash that ends a name shortened to CALL_NAME_MAX: `_` and 8 hex digits. */
const HASH_CHARS = 8;

/** A tool's calls, as it listed them, with what the caller keeps beside each of its offered calls. */
export interface ListedTool<T> {
  /** The tool's name (lower-case, at most 32 characters: daemon/tools/discover.ts). */
  name: string;
  calls: readonly ListedCall[];
  /** What the caller keeps with each offered call of this tool (its server, its key). */
  with: T;
}

export type OfferedEntry<T> = { name: string; tool: string; call: string; description: string; parameters: Record<string, unknown> } & { with: T };

/** A call listed and not offered, and why, in words for a log line. */
export interface LeftOut {
  tool: string;
  call: string;
  why: string;
}

/**
 * The name a call is offered under: `<tool>__<call>`, every character of the call that a provider
 * refuses made `_`; one longer than CALL_NAME_MAX is cut, and ended with a hash of the call's own
 * name, so two calls alike in their first characters still have names of their own.
 */
export function offeredName(tool: string, call: string): string {
  const whole = `${tool}${TOOL_SEPARATOR}${call.replace(/[^A-Za-z0-9_-]/g, "_")}`;
  if (whole.length <= CALL_NAME_MAX) return whole;
  const hash = createHash("sha256").update(call).digest("hex").slice(0, HASH_CHARS);
  return `${whole.slice(0, CALL_NAME_MAX - HASH_CHARS - 1)}_${hash}`;
}

/**
 * A call as it is kept between turns, fit to be offered once and for all as it is listed: its
 * description cut to DESCRIPTION_MAX characters (never inside a character); one that can't be
 * offered (a name or a schema too long) kept without them, saying why. A tool's list is kept in
 * memory as long as the process serves the agent: what a tool sends is never kept whole, and no
 * turn measures a schema again. With it, `chars`: the characters it is kept in (its name, its
 * description as cut, its schema as JSON), which bound a tool's list (LISTED_CHARS_MAX).
 */
export function listedCall(call: string, description: string, parameters: Record<string, unknown>): { listed: ListedCall; chars: number } {
  if (call.length > CALL_NAME_LISTED_MAX) {
    const listed = { call: `${call.slice(0, 200)}…`, description: "", parameters: {}, unfit: `its name is ${call.length} characters, over the ${CALL_NAME_LISTED_MAX} a call's may be` };
    return { listed, chars: listed.call.length + EMPTY_SCHEMA };
  }
  // A lone surrogate in what is offered would have the provider refuse every request while the tool is set.
  const cut = cutDescription(wellFormed(description), DESCRIPTION_MAX);
  if (!nestsWithin(parameters, PARAMETERS_DEPTH_MAX)) {
    return { listed: { call, description: cut, parameters: {}, unfit: `its arguments' schema nests deeper than ${PARAMETERS_DEPTH_MAX} arrays and objects` }, chars: call.length + cut.length + EMPTY_SCHEMA };
  }
  const json = JSON.stringify(parameters);
  const schema = json.length;
  if (schema > PARAMETERS_MAX) {
    return { listed: { call, description: cut, parameters: {}, unfit: `its arguments' schema is ${schema} characters, over the ${PARAMETERS_MAX} a call's may be` }, chars: call.length + cut.length + EMPTY_SCHEMA };
  }
  const fixed = wellFormedJson(json);
  const kept = fixed === json ? parameters : Schema.parse(JSON.parse(fixed));
  return { listed: { call, description: cut, parameters: kept }, chars: call.length + cut.length + schema };
}

/**
 * The calls a turn offers, from the tools' lists as listedCall kept them (the tools in the order
 * given, each tool's calls in the order of their names): a call named as one offered before it (two
 * that differ only in characters made `_`) is offered once, the first listed; one listedCall found
 * unfit (its name or schema too long) is left out, saying why;
 * past OFFERED_MAX in all, those of memory (`keep`) are kept first and the rest in order, the others
 * left out. `allowed` (a subagent's list) narrows them first, by tool name or offered name.
 */
export function offerCalls<T>(tools: readonly ListedTool<T>[], allowed: readonly string[] | undefined, keep: (tool: string) => boolean): { offered: OfferedEntry<T>[]; leftOut: LeftOut[] } {
  const candidates: OfferedEntry<T>[] = [];
  const leftOut: LeftOut[] = [];
  for (const tool of tools) {
    const names = new Set<string>();
    const mine: OfferedEntry<T>[] = [];
    for (const c of tool.calls) {
      const name = offeredName(tool.name, c.call);
      if (names.has(name)) continue;
      names.add(name);
      if (allowed !== undefined && !allowed.includes(tool.name) && !allowed.includes(name)) continue;
      if (c.unfit !== undefined) {
        leftOut.push({ tool: tool.name, call: c.call, why: c.unfit });
        continue;
      }
      mine.push({ name, tool: tool.name, call: c.call, description: c.description, parameters: c.parameters, with: tool.with });
    }
    mine.sort((a, b) => compare(a.name, b.name));
    candidates.push(...mine);
  }
  if (candidates.length <= OFFERED_MAX) return { offered: candidates, leftOut };
  // Memory's calls first, then the others in order, up to the most; offered in the order they had.
  const kept = new Set<OfferedEntry<T>>();
  for (const first of [true, false]) {
    for (const e of candidates) {
      if (kept.size >= OFFERED_MAX) break;
      if (keep(e.tool) === first) kept.add(e);
    }
  }
  for (const e of candidates) {
    if (!kept.has(e)) leftOut.push({ tool: e.tool, call: e.call, why: `past the ${OFFERED_MAX} calls a request may offer` });
  }
  return { offered: candidates.filter((e) => kept.has(e)), leftOut };
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * The calls, each whose name, description or schema holds a secret (one `secrets` takes out) marked
 * unfit: never offered, since what is offered reaches the model, and from its answers the client and
 * the conversation's events.
 */
export function unfitWithSecrets(calls: readonly ListedCall[], secrets: { redact(text: string): string }): ListedCall[] {
  const holds = (text: string) => secrets.redact(text) !== text;
  return calls.map((c) => (c.unfit === undefined && (holds(c.call) || holds(c.description) || holds(JSON.stringify(c.parameters))) ? { ...c, unfit: "its name, description or schema holds a secret" } : c));
}
