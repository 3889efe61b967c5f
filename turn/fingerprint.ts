// Fingerprints of what a prompt begins with: each section of the system prompt and the window's
// start. A provider caches a prompt up to its first change, so when the share it cached falls, the
// fingerprints of two requests say where the prompt changed first, or that nothing did.
import { createHash } from "node:crypto";
import { SECTION_NAMES, type PromptPrints, type SectionName } from "../protocol/index.js";
import { recentOr } from "./recent.js";
import type { Section } from "./sections.js";
import type { OfferedCall } from "./tools.js";

/** Texts fingerprinted lately, each with its fingerprint: a turn's sections are mostly the last turn's. */
const known = new Map<string, string>();
/** The most texts kept, the one used least lately forgotten first (each a section, at most a few hundred KiB). */
const KNOWN_MAX = 64;

/** The first 12 hex digits of the text's SHA-256: short, and enough to tell two texts apart. */
export function fingerprint(text: string): string {
  return recentOr(known, text, KNOWN_MAX, () => createHash("sha256").update(text).digest("hex").slice(0, 12));
}

/** Each section's fingerprint; the tools' covers the calls offered with the request, which a provider caches before the messages. */
export function sectionPrints(sections: readonly Section[], calls: readonly OfferedCall[]): PromptPrints["sections"] {
  const out: PromptPrints["sections"] = {};
  for (const s of sections) out[s.name] = fingerprint(s.name === "tools" ? `${s.text}\0${callsText(calls)}` : s.text);
  if (calls.length > 0 && out.tools === undefined) out.tools = fingerprint(`\0${callsText(calls)}`);
  return out;
}

function callsText(calls: readonly OfferedCall[]): string {
  return JSON.stringify(calls.map((c) => [c.name, c.description, c.parameters]));
}

/** The window's start: the number and time of its first event. */
export function windowPrint(start: number | undefined, time: string | undefined): string {
  return fingerprint(`${start ?? 0} ${time ?? ""}`);
}

/** The sections whose fingerprints differ (one present in only one of them included), in the prompt's order. */
export function changedSections(before: PromptPrints["sections"], now: PromptPrints["sections"]): SectionName[] {
  return SECTION_NAMES.filter((name) => before[name] !== now[name]);
}
