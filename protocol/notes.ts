// What the agent remembered on other harnesses, as Link gives it to this one: a block of
// memory/notes.md per note, between <!-- link:begin note SOURCE PATH --> and <!-- link:end -->
// (spec: contract.txt "Into its memory"). Pure text: the store reads and writes the file.
import { BLOCK_MARK } from "./identity.js";

/** The most bytes of a note's path and of its text (man lnk-link-harness-folder(5), "memory"). */
export const NOTE_LIMITS = { path: 256, text: 1024 * 1024 } as const;

/**
 * Why a note's path is refused, or undefined: a relative path of plain parts, '/' between them;
 * never absolute, never `..` or `.`, no backslash, no control character, no space (it is a word of
 * its block's marker line), at most NOTE_LIMITS.path bytes.
 */
export function notePathFault(path: string): string | undefined {
  if (Buffer.byteLength(path) > NOTE_LIMITS.path) return `over ${NOTE_LIMITS.path} bytes`;
  if (path.startsWith("/")) return "an absolute path";
  // eslint-disable-next-line no-control-regex
  if (/[\\\s\u0000-\u001f\u007f]/.test(path)) return "holds a backslash, a space or a control character";
  // A lone surrogate has no UTF-8 form: a note's file would be named with U+FFFD, so two such paths are one file.
  if (/\p{Cs}/u.test(path)) return "holds a lone surrogate (half of a UTF-16 pair)";
  if (path.split("/").some((part) => part === "" || part === "." || part === "..")) return "holds an empty part, . or ..";
  return undefined;
}

/** Why a note's source is refused, or undefined: a word (link, hermes, openclaw). */
export function noteSourceFault(source: string): string | undefined {
  return /^[a-z0-9][a-z0-9._-]{0,63}$/.test(source) ? undefined : "not a word of lowercase letters, digits, '.', '_', '-' (at most 64)";
}

/** Why a note's text is refused, or undefined: bounded, and never holding a block's marker. */
export function noteTextFault(text: string): string | undefined {
  if (Buffer.byteLength(text) > NOTE_LIMITS.text) return `over ${NOTE_LIMITS.text} bytes`;
  if (text.includes(BLOCK_MARK)) return `holds "${BLOCK_MARK}", the start of Link's markers`;
  return undefined;
}

/** Who wrote the blocks: configure (the settings' remembered) or state import (an ASP State's notes). */
export type NoteKind = "note" | "imported";

export interface NoteBlock {
  kind: NoteKind;
  source: string;
  path: string;
  text: string;
}

const BEGIN = /^<!-- link:begin (note|imported) (\S+) (\S+) [^\n]*(\n|$)/m;
const END = /^<!-- link:end -->[^\n]*(\n|$)/m;

/** A file's text split into what is the agent's own (byte for byte, blocks taken out) and Link's note blocks. */
export function splitNotes(text: string): { own: string; blocks: NoteBlock[] } {
  let own = "";
  const blocks: NoteBlock[] = [];
  let rest = text;
  for (;;) {
    const begin = BEGIN.exec(rest);
    if (!begin) break;
    const from = begin.index + begin[0].length;
    const end = END.exec(rest.slice(from));
    // A begin without its end is no block: the text is the agent's, kept as it is.
    if (!end) break;
    own += rest.slice(0, begin.index);
    blocks.push({ kind: begin[1] as NoteKind, source: begin[2] ?? "", path: begin[3] ?? "", text: rest.slice(from, from + end.index) });
    rest = rest.slice(from + end.index + end[0].length);
  }
  return { own: own + rest, blocks };
}

function blockOf(b: NoteBlock): string {
  const text = b.text.endsWith("\n") || b.text === "" ? b.text : `${b.text}\n`;
  return `<!-- link:begin ${b.kind} ${b.source} ${b.path} (written by Link: edit outside these markers) -->\n${text}<!-- link:end -->\n`;
}

/**
 * The file's text with Link's blocks of `kind` being `notes`, in their order, after the agent's own
 * text and the blocks of the other kind; the agent's own text kept byte for byte.
 */
export function withNotes(text: string, kind: NoteKind, notes: readonly Omit<NoteBlock, "kind">[]): string {
  const { own, blocks } = splitNotes(text);
  const kept = blocks.filter((b) => b.kind !== kind);
  const all = [...kept, ...notes.map((n) => ({ ...n, kind }))];
  if (all.length === 0) return own;
  const sep = own === "" || own.endsWith("\n") ? "" : "\n";
  return own + sep + all.map(blockOf).join("");
}

/** The notes as a turn shows them: the agent's own text, then each block under `(source: path)`. */
export function notesForTurn(text: string): string {
  const { own, blocks } = splitNotes(text);
  return [own.trim(), ...blocks.filter((b) => b.text.trim()).map((b) => `(${b.source}: ${b.path})\n${b.text.trim()}`)].filter(Boolean).join("\n\n");
}
