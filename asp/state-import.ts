// An ASP State taken in (spec: contract.txt "Taken in a switch"): each text written where the agent's
// file is missing or empty, each skill added whose name the agent has none of, the notes kept (its own,
// by their paths under memory/, where missing or empty; another harness's, in Link's blocks of
// memory/notes.md marked imported), and what was left behind named with why. Everything is checked
// before anything is written: bad input writes nothing.
import { existsSync, lstatSync, renameSync, rmdirSync, rmSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { z } from "zod";
import { AspState, LINK_BLOCK_HELD, describeIssues, type AspKind, outsideBlock, splitBlock, splitNotes, withNotes, type Note, type SessionForm } from "../protocol/index.js";
import { InvalidNameError, LIMITS, TREE_LIMITS, checkNoLinks, filePathFault, checkThread, flushFolderSync, makeFolder, paths, planNotes, protoKey, readText, replaceFile, unlinkQuiet, type AgentRef } from "../store/index.js";
import { InvalidSessions, checkSessions, importedAs, sweepLeft, thisHost, writeSessions } from "./sessions.js";

/**
 * The kinds `state import` takes: every kind `state export` and `_asp/export` give. (The contract's
 * `state.import` is what the endpoint's `_asp/import` takes over ASP: sessions; see daemon/contract.ts.)
 */
export const IMPORTED = ["instructions", "skills", "memory", "sessions"] as const satisfies readonly AspKind[];

/** Bad input: the field and what is wrong with it, never its value. */
export class ImportError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ImportError";
  }
}

export interface Imported {
  /** What came in, each a line for a person. */
  came: string[];
  /** What was left behind, and why. */
  left: string[];
  /**
   * Writes it all, the sessions last, and gives a line for each session written; nothing is written
   * before. A write that fails puts back everything written before it (each file as it was, each
   * skill and conversation taken out, each folder made for them removed), and throws.
   */
  write: () => Promise<string[]>;
}

/** A write, which gives how to put back what it changed. */
type Write = () => () => void;

/** The most of a file's text kept to put it back. */
const UNDO_MAX = 4 * 1024 * 1024;

/** The folders from `dir` up that are missing, the deepest first. */
function missingFolders(dir: string): string[] {
  const out: string[] = [];
  for (let at = dir; !existsSync(at) && !isLink(at) && dirname(at) !== at; at = dirname(at)) out.push(at);
  return out;
}

/** Removes each folder if it is empty (the deepest first); anything else is left as it is. */
function removeFolders(dirs: readonly string[]): void {
  for (const dir of dirs) {
    try {
      rmdirSync(dir);
    } catch {
      // not empty, or gone
    }
  }
}

/** A write of one file by `run`: put back, the file is as it was (or gone), and the folders made for it removed. */
function fileWrite(path: string, run: () => void): Write {
  return () => {
    const made = missingFolders(dirname(path));
    const before = readText(path, { max: UNDO_MAX, single: true });
    const mode = before === undefined ? undefined : statSync(path).mode & 0o777;
    run();
    return () => {
      if (before === undefined) unlinkQuiet(path);
      else replaceFile(path, before, mode);
      removeFolders(made);
    };
  };
}


/** Checks the State whole: the first fault found, naming its field, is thrown. */
export function checkState(raw: unknown): AspState {
  const proto = protoKey(raw);
  if (proto !== undefined) throw new ImportError(`invalid State: ${proto}: the key "__proto__" is not allowed`);
  // The sessions are checked by checkSessions, which names an event's wrong field by its kind.
  const parsed = AspState.extend({ sessions: z.unknown().optional() }).safeParse(raw);
  if (!parsed.success) throw new ImportError(`invalid State: ${describeIssues(parsed.error)}`);
  const { sessions: rawSessions, ...rest } = parsed.data;
  let sessions: SessionForm[] | undefined;
  try {
    sessions = rawSessions === undefined ? undefined : checkSessions(rawSessions);
  } catch (e) {
    if (e instanceof InvalidSessions) throw new ImportError(`invalid State: ${e.message}`);
    throw e;
  }
  const state: AspState = { ...rest, ...(sessions !== undefined ? { sessions } : {}) };
  // No more than a turn reads of instruction.md.
  if (state.instructions !== undefined && Buffer.byteLength(state.instructions) > LIMITS.settings) {
    throw new ImportError(`invalid State: instructions: over ${LIMITS.settings} bytes`);
  }
  // Lines that mark Link's block would be taken for it: the next configure would write the
  // identity over the text between them, and no export would give it.
  if (state.instructions !== undefined && splitBlock(state.instructions).block !== undefined) {
    throw new ImportError(`invalid State: instructions: ${LINK_BLOCK_HELD}`);
  }
  const names = new Set<string>();
  for (const [i, skill] of (state.skills ?? []).entries()) {
    try {
      checkThread(skill.name, "skill name");
    } catch (e) {
      if (e instanceof InvalidNameError) throw new ImportError(`invalid State: skills.${i}.name: not a skill's folder name`);
      throw e;
    }
    if (names.has(skill.name)) throw new ImportError(`invalid State: skills.${i}.name: a second skill of that name`);
    names.add(skill.name);
    const files = Object.entries(skill.files);
    if (files.length > TREE_LIMITS.files) throw new ImportError(`invalid State: skills.${i}.files: over ${TREE_LIMITS.files} files`);
    if (skill.files["SKILL.md"] === undefined) throw new ImportError(`invalid State: skills.${i}.files: no SKILL.md`);
    const seen = new Set<string>();
    for (const [path, text] of files) {
      const why = filePathFault(path);
      if (why) throw new ImportError(`invalid State: skills.${i}.files: a path ${why}`);
      if (Buffer.byteLength(text) > TREE_LIMITS.file) throw new ImportError(`invalid State: skills.${i}.files.${path}: over ${TREE_LIMITS.file} bytes`);
      if (text.includes("\0")) throw new ImportError(`invalid State: skills.${i}.files.${path}: not text`);
      // A file and a folder of the same path can't both be written.
      for (let at = dirname(path); at !== "."; at = dirname(at)) seen.add(`${at}/`);
      seen.add(path);
    }
    for (const path of Object.keys(skill.files)) {
      if (seen.has(`${path}/`)) throw new ImportError(`invalid State: skills.${i}.files.${path}: both a file and a folder`);
    }
  }
  const notes = new Set<string>();
  const folders = new Set<string>();
  for (const note of state.memory ?? []) {
    if (ownFile(note) !== undefined) for (let at = dirname(note.path); at !== "."; at = dirname(at)) folders.add(at);
  }
  for (const [i, note] of (state.memory ?? []).entries()) {
    const key = `${note.source} ${note.path}`;
    if (notes.has(key)) throw new ImportError(`invalid State: memory.${i}: a second note of that source and path`);
    notes.add(key);
    if (ownFile(note) !== undefined && folders.has(note.path)) throw new ImportError(`invalid State: memory.${i}.path: both a file and a folder`);
  }
  return state;
}

/** Where an own note goes: its path, under memory/, else nowhere (it goes into a block). */
function ownFile(note: Note): string | undefined {
  return note.source === "link" && note.path.startsWith("memory/") && note.path !== "memory/" ? note.path : undefined;
}

/** Whether the agent's text there is missing or empty (Link's blocks aside). */
function emptyText(text: string | undefined, own: (t: string) => string): boolean {
  return text === undefined || own(text).trim() === "";
}

/** The text a file of the agent's holds now (never through a link, bounded). */
function current(root: string, path: string): string | undefined {
  checkNoLinks(root, path);
  return readText(path, { max: TREE_LIMITS.file * 2, single: true });
}

/** Plans the import of a checked State into the agent's folder: what comes, what is left, and the writing. */
export function planImport(agent: AgentRef, state: AspState): Imported {
  const p = paths(agent);
  const came: string[] = [];
  const left: string[] = [];
  const writes: Write[] = [];

  if (state.instructions !== undefined) {
    const text = current(p.dir, p.instruction);
    if (!state.instructions.trim()) left.push("instructions: empty");
    else if (!emptyText(text, outsideBlock)) left.push("instructions: instructions/instruction.md already holds text of the agent's own");
    else {
      const before = text ?? "";
      const made = before + (before === "" || before.endsWith("\n") ? "" : "\n") + state.instructions;
      const mode = text === undefined ? 0o600 : statSync(p.instruction).mode & 0o777;
      writes.push(fileWrite(p.instruction, () => replaceFile(p.instruction, made, mode)));
      came.push("instructions: into instructions/instruction.md");
    }
  }

  if (state.skills?.length) {
    checkNoLinks(p.dir, join(p.skills, "x"));
    // What a killed import left half written is nobody's: found by no reader, removed by no one else.
    sweepSkills(p.skills);
    for (const skill of state.skills) {
      const dir = join(p.skills, skill.name);
      if (existsSync(dir) || isLink(dir)) {
        left.push(`skill ${skill.name}: the agent has a skill of that name`);
        continue;
      }
      writes.push(() => {
        const made = missingFolders(p.skills);
        writeSkill(p.skills, skill.name, skill.files);
        return () => {
          rmSync(dir, { recursive: true, force: true });
          removeFolders(made);
        };
      });
      came.push(`skill ${skill.name}: ${Object.keys(skill.files).length} file${Object.keys(skill.files).length === 1 ? "" : "s"} into skills/${skill.name}/`);
    }
  }

  const blocks: Note[] = [];
  // The blocks an earlier import wrote: a note already there in one is said to be.
  const already = state.memory?.length ? splitNotes(current(p.dir, p.notes) ?? "").blocks : [];
  // Its own notes go to their paths; notes.md's own text is planned with the blocks, below.
  let notesOwn: string | undefined;
  for (const note of state.memory ?? []) {
    const path = ownFile(note);
    if (path === undefined) {
      blocks.push(note);
      if (already.some((b) => b.kind === "imported" && b.source === note.source && b.path === note.path && b.text.trim() === note.text.trim())) {
        left.push(`note ${note.path} (${note.source}): already in a block of memory/notes.md`);
      } else came.push(`note ${note.path} (${note.source}): into a block of memory/notes.md`);
      continue;
    }
    const file = join(p.dir, path);
    if (file === p.notes) {
      if (!emptyText(current(p.dir, p.notes), (t) => splitNotes(t).own)) left.push(`note ${path}: memory/notes.md already holds text of the agent's own`);
      else if (note.text.trim()) {
        notesOwn = note.text;
        came.push(`note ${path}`);
      }
      continue;
    }
    const text = current(p.dir, file);
    if (!emptyText(text, (t) => t)) left.push(`note ${path}: the agent's file already holds text`);
    else if (!note.text.trim()) left.push(`note ${path}: empty`);
    else {
      writes.push(fileWrite(file, () => replaceFile(file, note.text)));
      came.push(`note ${path}`);
    }
  }
  if (blocks.length || notesOwn !== undefined) {
    // Blocks an earlier import wrote are kept, each replaced by a note of the same source and path.
    const before = current(p.dir, p.notes) ?? "";
    const kept = splitNotes(before).blocks.filter((b) => b.kind === "imported" && !blocks.some((n) => n.source === b.source && n.path === b.path));
    const all = [...kept.map(({ source, path, text }) => ({ source, path, text })), ...blocks];
    if (notesOwn !== undefined) {
      // The agent's own text is empty: the note's text becomes it, Link's blocks after it.
      const made = withNotes(notesOwn + withNotes(before, "imported", []).slice(splitNotes(before).own.length), "imported", all);
      writes.push(fileWrite(p.notes, () => replaceFile(p.notes, made, existsSync(p.notes) ? statSync(p.notes).mode & 0o777 : 0o600)));
    } else {
      const write = planNotes(agent, "imported", all);
      if (write) writes.push(fileWrite(p.notes, write));
    }
  }

  // Each session not yet here, as a new conversation; one an earlier import made is not made twice.
  const sessions: SessionForm[] = [];
  for (const session of state.sessions ?? []) {
    const as = session.events.length === 0 ? undefined : importedAs(agent, session);
    if (session.events.length === 0) left.push(`session ${session.thread}: no events`);
    else if (as !== undefined) left.push(`session ${session.thread}: already imported as chats/${as}/`);
    else sessions.push(session);
  }

  const write = async (): Promise<string[]> => {
    const undos: (() => void)[] = [];
    try {
      for (const w of writes) undos.push(w());
      if (sessions.length === 0) return [];
      // The agent's folder itself, where missing: chats/ is made in it.
      const made = missingFolders(p.dir);
      makeFolder(p.dir);
      undos.push(() => removeFolders(made));
      const written = await writeSessions(agent, sessions);
      return written.imported.map((s) => `session ${s.thread}: ${s.events} event${s.events === 1 ? "" : "s"} into chats/${s.as}/`);
    } catch (e) {
      for (const undo of undos.reverse()) {
        try {
          undo();
        } catch {
          // Put back what can be; the error that stopped the import is the one to tell.
        }
      }
      throw e;
    }
  };
  return { came, left, write };
}

function isLink(path: string): boolean {
  try {
    return lstatSync(path).isSymbolicLink();
  } catch {
    return false;
  }
}

/**
 * A skill being written: `.<name>.importing-<host>-<pid>`, the host tag saying whose pids it holds
 * (thisHost); without it, a name an earlier version made. No skill's name begins with a dot.
 */
const IMPORTING = /^\.(.+)\.importing-(?:([0-9a-f]{8})-)?(\d+)$/;

/** Removes the skills that imports killed midway left half written (sweepLeft). */
function sweepSkills(skills: string): void {
  sweepLeft(skills, (name) => {
    const m = IMPORTING.exec(name);
    return m ? { host: m[2], pid: Number(m[3]) } : undefined;
  });
}

/** A skill's folder, written whole beside skills/ first and then put in place, so no half skill is seen. */
function writeSkill(skills: string, name: string, files: Record<string, string>): void {
  const tmp = join(skills, `.${name}.importing-${thisHost()}-${process.pid}`);
  rmSync(tmp, { recursive: true, force: true });
  try {
    for (const [path, text] of Object.entries(files)) {
      const file = join(tmp, ...path.split("/"));
      makeFolder(dirname(file));
      replaceFile(file, text);
    }
    renameSync(tmp, join(skills, name));
    // The skill's name in skills/ on disk, as its files are.
    flushFolderSync(skills);
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
}
