// What the harness holds of the agent's own, in ASP's portable forms (spec: contract.txt "Out of the
// harness", "What it exports"): its instruction text outside Link's block, the skills it made, and its
// memory files as notes. What Link wrote in (the identity's block, its skills' copies in the home, the
// settings' remembered notes) is left out, so nothing comes back as the harness's own.
import { relative } from "node:path";
import { AspState, describeIssues, IDENTITY_HEADINGS, LINK_BLOCK_HELD, Note, outsideBlock, splitBlock, splitNotes, type AspKind } from "../protocol/index.js";
import { filePathFault, LIMITS, listOwnSkills, paths, readStanding, readTree, type AgentRef } from "../store/index.js";

/** The kinds `state export` gives (sessions are not given yet). */
export const EXPORTED = ["instructions", "skills", "memory"] as const satisfies readonly AspKind[];

export interface Exported {
  state: AspState;
  /** What was not carried, by its path from the agent's folder, and why. */
  left: { path: string; why: string }[];
}

/** Where a text of the agent's own already says which of Identity::all it is, it is given as it is. */
const HEADED = new RegExp(`^(${IDENTITY_HEADINGS.map(([, h]) => h).join("|")})\\s*$`, "m");

/**
 * The agent's own instruction text: instruction.md outside Link's block, under its heading; `onCut`
 * called when only its first part is, `onHeld` when it is not carried, as it holds a second block.
 */
function instructions(agent: AgentRef, onCut: () => void, onHeld: () => void): string | undefined {
  const file = readStanding(agent, LIMITS.settings, onCut);
  if (file === undefined) return undefined;
  const own = outsideBlock(file).trim();
  if (!own) return undefined;
  // No import takes it: taken in where there is no block, it would be taken for Link's.
  if (splitBlock(own).block !== undefined) {
    onHeld();
    return undefined;
  }
  return HEADED.test(own) ? `${own}\n` : `## Standing instructions\n${own}\n`;
}

/**
 * The most bytes one export's State is, as JSON: what `state import` takes of one, less room for the
 * State's frame. Past it, a skill or a note is left out, named, and the rest still goes.
 */
export const EXPORT_STATE_BYTES = 64 * 1024 * 1024 - 64 * 1024;

/**
 * The bytes a text takes in the State's JSON: quoted, escaped, in UTF-8, and room for its key and
 * the indenting `state export` prints it with.
 */
const jsonBytes = (text: string): number => Buffer.byteLength(JSON.stringify(text), "utf8") + 48;

/** Exports the kinds asked (all it gives, by default). */
export function exportState(agent: AgentRef, kinds: readonly AspKind[] = EXPORTED, max = EXPORT_STATE_BYTES): Exported {
  const p = paths(agent);
  const state: AspState = {};
  const left: Exported["left"] = [];
  let size = 0;
  /** Whether `bytes` more fit in the export; when they don't, `path` is named as left out. */
  const fits = (path: string, bytes: number): boolean => {
    if (size + bytes > max) {
      left.push({ path, why: `past the ${max} bytes one export carries` });
      return false;
    }
    size += bytes;
    return true;
  };
  if (kinds.includes("instructions")) {
    let cut = false;
    const text = instructions(
      agent,
      () => (cut = true),
      () => left.push({ path: "instructions/instruction.md", why: `its text outside Link's block ${LINK_BLOCK_HELD}: not carried` }),
    );
    if (text !== undefined && fits("instructions/instruction.md", jsonBytes(text))) {
      state.instructions = text;
      // What a turn reads of it is carried, and said to be only that: the rest is left out.
      if (cut) left.push({ path: "instructions/instruction.md", why: `over the limit of ${LIMITS.settings} bytes: only its first ${LIMITS.settings} bytes carried` });
    }
  }
  if (kinds.includes("skills")) {
    const skills = listOwnSkills(agent, (path, why) => left.push({ path: relative(p.dir, path), why: `${why.replace(`${path} `, "")}: its skill not carried` }));
    state.skills = skills.flatMap((skill) => {
      const tree = readTree(p.dir, `${p.skills}/${skill.folder}`);
      left.push(...tree.left);
      // A file no import takes by its name (a backslash, a control character, too long) is named, not carried.
      for (const path of Object.keys(tree.files)) {
        const fault = filePathFault(path);
        if (fault === undefined) continue;
        left.push({ path: `skills/${skill.folder}/${path}`, why: `its name ${fault}: not carried` });
        delete tree.files[path];
      }
      // Its SKILL.md left out (not UTF-8, a link, too large): no import takes the skill without it.
      if (tree.files["SKILL.md"] === undefined) {
        left.push({ path: `skills/${skill.folder}`, why: "its SKILL.md is not carried, and a skill is not without it" });
        return [];
      }
      const bytes = Object.entries(tree.files).reduce((sum, [path, text]) => sum + jsonBytes(path) + jsonBytes(text), jsonBytes(skill.folder));
      return fits(`skills/${skill.folder}`, bytes) ? [{ name: skill.folder, files: tree.files }] : [];
    });
  }
  if (kinds.includes("memory")) {
    const tree = readTree(p.dir, p.memory);
    left.push(...tree.left);
    // notes.md without Link's blocks (the settings' remembered, an import's notes): the agent's own only.
    if (tree.files["notes.md"] !== undefined) {
      const own = splitNotes(tree.files["notes.md"]).own;
      if (own.trim()) tree.files["notes.md"] = own;
      else delete tree.files["notes.md"];
    }
    // A file no note can be (a name with a space, a text holding Link's own markers) is named, not carried: the others are.
    state.memory = [];
    for (const [path, text] of Object.entries(tree.files)) {
      const note = Note.safeParse({ path: `memory/${path}`, text, source: "link" });
      if (note.success) {
        if (fits(note.data.path, jsonBytes(note.data.path) + jsonBytes(note.data.text))) state.memory.push(note.data);
      }
      else left.push({ path: `memory/${path}`, why: `not a note ASP carries: ${describeIssues(note.error)}` });
    }
  }
  // Checked as any reader of it will: what is given is valid ASP.
  return { state: AspState.parse(state), left };
}
