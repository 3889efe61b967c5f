// The instructions: sections in the order of how often each changes, least first, so a provider's
// cache holds. Spec: "Where does Link Harness take its instructions from?" (decisions.txt).
import { SECTION_NAMES, blockText, notesForTurn, splitBlock, splitNotes, type SectionName, type Settings } from "../protocol/index.js";
import { listRepositorySkills, listSkills, paths, readNotes, readRepositoryInstructions, readStanding, repositoryOf, sectionBytes, type AgentRef } from "../store/index.js";
import type { OfferedCall } from "./tools.js";

export interface Section {
  name: SectionName;
  /** Who owns the text: who may replace it. */
  owner: string;
  text: string;
}

/** Each section's owner and its most, in characters, unless the settings' [instructions] say otherwise. */
export const SECTION_DEFAULTS: Record<SectionName, { owner: string; max: number }> = {
  base: { owner: "link", max: 8_000 },
  model: { owner: "link", max: 4_000 },
  tools: { owner: "link", max: 4_000 },
  environment: { owner: "link", max: 2_000 },
  repository: { owner: "repository", max: 16_000 },
  skills: { owner: "agent", max: 8_000 },
  standing: { owner: "owner", max: 16_000 },
  notes: { owner: "agent", max: 16_000 },
};

const BASE = `You are a personal AI agent run by Link. You answer your owner and the people your owner lets you talk with, in the chats Link carries.
Each message you get starts with a line in brackets saying when it was sent, on which channel and who is speaking; answer the message, not that line.
Be direct and accurate. When you don't know, say so. Use your tools when they help, and say what you did.`;

/**
 * Who the agent is, in the base, from the settings: only where the settings replace the standing
 * section (instructions.standing.text), which would otherwise carry it (standingText).
 */
function identityText(settings: Settings, replaced: boolean): string {
  const id = settings.identity;
  if (!id || !replaced) return "";
  const parts: string[] = [];
  if (id.persona) parts.push(`## Who you are\n${id.persona.trim()}`);
  if (id.owner) parts.push(`## Your owner\n${id.owner.trim()}`);
  return parts.join("\n\n");
}

function toolsText(calls: readonly Pick<OfferedCall, "tool">[]): string {
  if (calls.length === 0) return "";
  const tools = [...new Set(calls.map((c) => c.tool))];
  const lines = [
    `You have tools: ${tools.join(", ")}. Each call is named <tool>__<call>.`,
    "A tool's answer is cut at 32 KiB; a call may fail or be unavailable: say so rather than guess.",
  ];
  if (tools.includes("memory")) {
    lines.push("memory searches what was said in your past conversations (memory__search): use it when asked about something said before that you don't see here.");
  }
  return lines.join("\n");
}

function environmentText(agent: AgentRef, settings: Settings): string {
  const p = paths(agent);
  const lines = [`Your files folder (where your tools work): ${settings.environment?.files ?? p.files}`];
  const channels = settings.environment?.channels;
  if (channels?.length) lines.push(`Your channels: ${channels.join(", ")}`);
  return lines.join("\n");
}

/**
 * The instructions of the repository the session works in (its working folder, else the agent's
 * files folder): its AGENTS.md. Where there is no repository, or it has none, there is no section,
 * and the prompt is what it would be without one, byte for byte.
 */
function repositoryText(agent: AgentRef, cwd: string | undefined, max: number): string {
  const root = repositoryOf(cwd ?? paths(agent).files);
  if (root === undefined) return "";
  const text = readRepositoryInstructions(root, sectionBytes(max))?.trim();
  const skills = listRepositorySkills(root);
  if (!text && skills.length === 0) return "";
  const parts = [`## The repository you work in: ${root}`];
  if (text) parts.push(`Its AGENTS.md says:\n${text}`);
  // The repository's own skills: offered, never a command (a repository is often someone else's).
  if (skills.length) parts.push(["Its skills (read a skill's SKILL.md before you use it):", ...skills.map((s) => `- ${s.name}: ${s.description} (${s.path})`)].join("\n"));
  return parts.join("\n");
}

function skillsText(agent: AgentRef, settings: Settings): string {
  // The settings the turn read: each turn reads them once.
  const skills = listSkills(agent, settings);
  if (skills.length === 0) return "";
  return [
    "Skills you have (read a skill's SKILL.md before you use it):",
    ...skills.map((s) => `- ${s.name}: ${s.description} (${s.path})`),
  ].join("\n");
}

function notesText(agent: AgentRef, settings: Settings, max: number): string {
  const parts: string[] = [];
  const file = readNotes(agent, sectionBytes(max)) ?? "";
  const notes = notesForTurn(file);
  if (notes) parts.push(notes);
  // What a switch left of what the agent remembered that configure has not written into notes.md yet.
  const written = new Set(splitNotes(file).blocks.map((b) => `${b.source} ${b.path}`));
  for (const note of settings.remembered ?? []) {
    if (written.has(`${note.source} ${note.path}`)) continue;
    if (note.source !== "link" || !notes) parts.push(`(${note.source}: ${note.path})\n${note.text.trim()}`);
  }
  return parts.length ? `What you remember:\n${parts.join("\n\n")}` : "";
}

/**
 * Your standing instructions: Link's block (who the agent is, each text under its heading) first,
 * then the owner's own text of instruction.md, outside the block, under "## Standing instructions".
 * The block's texts are the settings' identity whenever it holds one: configure wrote the same
 * into the file's block, and a Bind, whose process writes nothing outside chats/, left the file as
 * it was, so a block there may be an earlier configure's, or none. Else the block the file holds.
 */
function standingText(file: string | undefined, settings: Settings): string {
  const split = file === undefined ? undefined : splitBlock(file);
  const block = blockText(settings.identity ?? {}).trim() || (split?.block?.trim() ?? "");
  const own = split === undefined ? "" : (split.before + split.after).trim();
  if (!own) return block;
  if (!block) return `## Standing instructions\n${own}`;
  // The block's last heading is the standing instructions' when it holds some: the owner's text goes on under it.
  return /^## Standing instructions$/m.test(block) ? `${block}\n\n${own}` : `${block}\n\n## Standing instructions\n${own}`;
}

/** Holds a section to its most, saying what was cut. */
export function cut(text: string, max: number): string {
  if (text.length <= max) return text;
  const marker = `\n[cut: ${text.length - max} more characters]`;
  return text.slice(0, Math.max(0, max - marker.length)) + marker;
}

/** The sections of the system prompt, each read at this turn through the store. */
export function composeSections(agent: AgentRef, settings: Settings, calls: readonly Pick<OfferedCall, "tool">[], cwd?: string): Section[] {
  // A file is read only as far as its section can hold.
  const standingMax = settings.instructions?.standing?.max ?? SECTION_DEFAULTS.standing.max;
  const replaced = settings.instructions?.standing?.text !== undefined;
  const standing = replaced ? undefined : readStanding(agent, sectionBytes(standingMax));
  const made: Record<SectionName, (max: number) => string> = {
    base: () => [BASE, identityText(settings, replaced)].filter(Boolean).join("\n\n"),
    model: () => "",
    tools: () => toolsText(calls),
    environment: () => environmentText(agent, settings),
    repository: (max) => repositoryText(agent, cwd, max),
    skills: () => skillsText(agent, settings),
    standing: () => standingText(standing, settings),
    notes: (max) => notesText(agent, settings, max),
  };
  const out: Section[] = [];
  for (const name of SECTION_NAMES) {
    const own = settings.instructions?.[name];
    const defaults = SECTION_DEFAULTS[name];
    // Every section can be replaced, the base included.
    const max = own?.max ?? defaults.max;
    const text = own?.text ?? made[name](max);
    if (!text) continue;
    out.push({ name, owner: own?.owner ?? defaults.owner, text: cut(text, max) });
  }
  return out;
}

export function systemPrompt(sections: readonly Section[]): string {
  return sections.map((s) => s.text).join("\n\n");
}

/** The line that heads a user message: date, time, channel and speaker, kept with it. */
export function messageHeader(time: Date, channel: string | undefined, from: { id: string; name?: string; owner: boolean } | undefined): string {
  const iso = time.toISOString();
  const when = `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;
  const who = !from
    ? "your owner"
    : from.owner
      ? `${headerWord(from.name ?? from.id, true)} (your owner)`
      : `${from.name ? `${headerWord(from.name, false)} ` : ""}(${headerWord(from.id, false)})`;
  return `[${when} · ${headerWord(channel ?? "direct", false)} · ${who}]`;
}

/** The most of a name, an id or a channel a header holds. */
const HEADER_WORD_MAX = 64;

/**
 * A name, id or channel as a header holds it: on one line, without the brackets, parentheses and dots
 * that part a header, and (but for the owner's own) without "your owner", so no speaker's name reads
 * as a header of its own or as the owner's.
 */
function headerWord(word: string, owner: boolean): string {
  let w = word.replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}[\]()\u00b7]+/gu, " ");
  // Until none is left: taking one out may join the letters around it into another.
  if (!owner) for (let was = ""; was !== w; ) [was, w] = [w, w.replace(/your\s*owner/giu, "")];
  w = w.replace(/\s+/gu, " ").trim();
  if (w.length > HEADER_WORD_MAX) w = `${w.slice(0, HEADER_WORD_MAX)}…`;
  return w || "?";
}
