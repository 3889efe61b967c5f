// An OpenClaw state folder read into an ASP State (`state import --from openclaw DIR`; man
// lnk-link-harness(1)): who the agent is from its workspace's SOUL.md, IDENTITY.md, USER.md and
// AGENTS.md (each left out while it is OpenClaw's own seeded default), what it remembered from
// MEMORY.md and memory/*.md as notes of source `openclaw`, its skills, and its sessions from the
// agent's SQLite database (openclaw-sessions.ts). Everything else found there is named as left
// behind, with why: nothing is dropped silently. The folder is untrusted: a link is never followed
// (but DIR itself, which the person named), anything but a regular file is named and not read, so is
// a file of more than one name (a hard link), every read is bounded, and nothing is written anywhere.
import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readSync, realpathSync } from "node:fs";
import { createHash } from "node:crypto";
import { basename, join, relative, sep } from "node:path";
import { AspState, BLOCK_MARK, Note, blockText, type IdentityTexts } from "../protocol/index.js";
import { StoreError } from "../protocol/index.js";
import { TREE_LIMITS, checkThread, readText, readTree } from "../store/index.js";
import { OpenClawError, SessionsRead, readDatabase, readTranscript } from "./openclaw-sessions.js";

export { OpenClawError } from "./openclaw-sessions.js";

/** The most of the agent's database read: sql.js holds it whole in memory. */
export const OPENCLAW_DB_MAX = 1024 * 1024 * 1024;
/** The most of one JSONL transcript read (OpenClaw's sessions before its database). */
const TRANSCRIPT_MAX = 64 * 1024 * 1024;
/** Where OpenClaw kept an agent's transcripts before its database: sessions/<id>.jsonl. */
const TRANSCRIPTS = "sessions";
/** The most of openclaw.json and of each workspace file read. */
const TEXT_MAX = 1024 * 1024;

/** Where OpenClaw keeps an agent's database, under its state folder. */
const DB_FOLDER = "agent";
const DB_FILE = "openclaw-agent.sqlite";
/** OpenClaw's first agent, read when the state folder holds several. */
const MAIN = "main";

/**
 * OpenClaw's own seeded workspace files, as OpenClaw 2026.9.6 writes them before anyone edits them:
 * the SHA-256 of each file's text with its line ends made LF, each line's trailing blanks and the
 * text's leading and trailing blank lines taken off. A file with exactly that text is the harness's
 * own default and is not carried; any change makes the whole file the agent's own.
 */
const SEEDED: Record<string, string> = {
  "AGENTS.md": "0baf6e9b9f399a7ce5f38ad34a0cab96aa3445bf6cec3304b5094bde3678c7f9",
  "SOUL.md": "48d7e911d1addb62dee28ff995698d8f214f15d457998bb27cd38156c4f8c498",
  "USER.md": "f0d3a7f599d4d917a78b25e7eee91e469feae0cb8c573f012fcc13e2035e4df1",
  "IDENTITY.md": "2ccaf369c813a70df90a7e2f83800b482d6f7e5022320d137151b5fd43342523",
};

/** Which text of the identity each workspace file goes into, in the order they are joined. */
const IDENTITY_FILES = [
  ["SOUL.md", "persona"],
  ["IDENTITY.md", "persona"],
  ["USER.md", "owner"],
  ["AGENTS.md", "standing"],
] as const;
const MEMORY_FILES = ["MEMORY.md", "memory.md"];

export interface FromOpenClaw {
  /** The State read, as `state export` would print it. */
  state: AspState;
  /** What was not carried, each a line for a person. */
  left: string[];
}

type Kind = "file" | "folder" | "link" | "other" | undefined;

function kindOf(path: string): Kind {
  try {
    const st = lstatSync(path);
    return st.isSymbolicLink() ? "link" : st.isDirectory() ? "folder" : st.isFile() ? "file" : "other";
  } catch {
    return undefined;
  }
}

/** Whether a text is OpenClaw's own seeded default for that file. */
export function isSeeded(file: string, text: string): boolean {
  const seeded = SEEDED[file];
  if (seeded === undefined) return false;
  const normal = text
    .replace(/\r\n?/g, "\n")
    .split("\n")
    .map((line) => line.trimEnd())
    .join("\n")
    .trim();
  return createHash("sha256").update(normal).digest("hex") === seeded;
}

/** A file of more than one name, not read. */
class HardLink extends OpenClawError {}

/**
 * A file's bytes, never through a link, never a FIFO or a device, never a file of more than one name
 * (HardLink), at most `max`. A hard link in the folder may be any file of the machine this user can
 * read, named from inside it: the workspace's files are refused so too (readText's `single`).
 */
function readBytes(path: string, max: number): Buffer {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new OpenClawError(`${path} is not a regular file`);
    if (st.nlink > 1) throw new HardLink(`${path} has ${st.nlink} names (a hard link): copy it to give it one (cp ${path} ${path}.new && mv ${path}.new ${path})`);
    if (st.size > max) throw new OpenClawError(`${path} is over the limit of ${max} bytes`);
    const buffer = Buffer.allocUnsafe(st.size);
    let got = 0;
    while (got < st.size) {
      const n = readSync(fd, buffer, got, st.size - got, got);
      if (n === 0) break;
      got += n;
    }
    return buffer.subarray(0, got);
  } finally {
    closeSync(fd);
  }
}

/** Why a thing found is not carried, by its kind. */
function what(kind: Kind): string {
  return kind === "link" ? "a symbolic link, not followed" : kind === "folder" ? "a folder" : kind === "other" ? "not a regular file" : "a file";
}

/** A text file of the folder, or why it can't be read. */
function readFile(path: string): { text: string } | { why: string } {
  const kind = kindOf(path);
  if (kind !== "file") return { why: what(kind) };
  try {
    const text = readText(path, { max: TEXT_MAX, single: true });
    if (text === undefined) return { why: "gone while it was read" };
    if (text.includes("\0") || text.includes("\uFFFD")) return { why: "not UTF-8 text" };
    return { text };
  } catch (e) {
    return { why: (e as Error).message.replace(`${path} `, "").replace(/^refused: /, "") };
  }
}

/** The entries of a folder, sorted; none when it can't be listed. */
function entries(dir: string): string[] {
  try {
    return readdirSync(dir).sort();
  } catch {
    return [];
  }
}

/** Where the state folder and the workspace are: DIR itself, or DIR holding state/ (and workspace/ beside it). */
function layout(root: string): { state: string } {
  const isState = (dir: string) => kindOf(join(dir, "openclaw.json")) === "file" || kindOf(join(dir, "agents")) === "folder";
  if (isState(root)) return { state: root };
  if (kindOf(join(root, "state")) === "folder" && isState(join(root, "state"))) return { state: join(root, "state") };
  throw new OpenClawError(
    `${root} is not an OpenClaw state folder: it holds neither openclaw.json nor agents/, nor a state/ folder that does (give ~/.openclaw, or a folder holding state/ and workspace/)`,
  );
}

/** The workspace's folder name openclaw.json sets (agents.defaults.workspace), read as a name only. */
function configuredWorkspace(config: unknown): string | undefined {
  if (typeof config !== "object" || config === null) return undefined;
  const agents = (config as { agents?: { defaults?: { workspace?: unknown } } }).agents;
  const workspace = agents?.defaults?.workspace;
  return typeof workspace === "string" && workspace.trim() ? workspace : undefined;
}

/** Reads the OpenClaw state folder at `dir` into a State, naming everything it leaves behind. */
export async function readOpenClaw(dir: string): Promise<FromOpenClaw> {
  let root: string;
  try {
    root = realpathSync(dir);
  } catch {
    throw new OpenClawError(`${dir}: no such folder`);
  }
  if (kindOf(root) !== "folder") throw new OpenClawError(`${dir} is not a folder`);
  const { state: stateDir } = layout(root);
  const rel = (path: string) => relative(root, path).split(sep).join("/") || ".";
  const left: string[] = [];
  const leave = (path: string, why: string) => left.push(`${rel(path)}: ${why}`);

  // openclaw.json: only where the workspace is; the rest is OpenClaw's own settings.
  const configPath = join(stateDir, "openclaw.json");
  let configured: string | undefined;
  if (kindOf(configPath) !== undefined) {
    const read = readFile(configPath);
    if ("why" in read) leave(configPath, `${read.why}: not read`);
    else {
      try {
        configured = configuredWorkspace(JSON.parse(read.text));
      } catch {
        leave(configPath, "not plain JSON, so where it sets the workspace is not known: workspace/ is looked for");
      }
    }
  }

  // The workspace: the folder openclaw.json names, found by its name in DIR (a path there is the other
  // machine's, and never followed), else OpenClaw's default, workspace/.
  const name = configured === undefined ? undefined : basename(configured.replace(/\/+$/, ""));
  const names = [...(name && !name.startsWith(".") && name !== ".." ? [name] : []), "workspace"];
  const places = [...new Set(names.flatMap((n) => [join(root, n), join(stateDir, n)]))];
  const workspace = places.find((p) => kindOf(p) === "folder");
  for (const p of places) if (kindOf(p) === "link") leave(p, "a symbolic link, not followed");
  if (workspace === undefined) {
    left.push(`workspace: none found in ${rel(root) === "." ? "DIR" : rel(root)}${configured !== undefined ? ` (openclaw.json names ${JSON.stringify(configured.slice(0, 200))}; a folder of that name is looked for in DIR)` : ""}`);
  }

  const state: AspState = {};
  if (workspace !== undefined) readWorkspace(workspace, state, leave);

  // The state folder: the agent's database is read; everything else is OpenClaw's own.
  const agentsDir = join(stateDir, "agents");
  for (const entry of entries(stateDir)) {
    const path = join(stateDir, entry);
    if (path === agentsDir || path === workspace) continue;
    if (entry === "openclaw.json") leave(path, "OpenClaw's own settings (its gateway, models and channels): the agent's spec in Link holds these");
    else leave(path, `${what(kindOf(path))} of OpenClaw's own, not carried`);
  }
  const agents = kindOf(agentsDir) === "folder" ? entries(agentsDir) : [];
  if (kindOf(agentsDir) === "link") leave(agentsDir, "a symbolic link, not followed");
  const chosen = agents.includes(MAIN) ? MAIN : agents.length === 1 ? agents[0] : undefined;
  for (const id of agents) if (id !== chosen) leave(join(agentsDir, id), `another OpenClaw agent's folder, not read (an import reads agent ${MAIN}, or the only one)`);
  if (chosen === undefined) {
    left.push(`sessions: none read, since ${rel(agentsDir)}/ holds no agent's folder`);
    return { state: AspState.parse(state), left };
  }
  const agentDir = join(agentsDir, chosen);
  const dbDir = join(agentDir, DB_FOLDER);
  const db = join(dbDir, DB_FILE);
  if (kindOf(agentDir) !== "folder") {
    leave(agentDir, `${what(kindOf(agentDir))}: no sessions read`);
    return { state: AspState.parse(state), left };
  }
  const transcripts = join(agentDir, TRANSCRIPTS);
  const hasTranscripts = kindOf(transcripts) === "folder";
  for (const entry of entries(agentDir)) {
    const path = join(agentDir, entry);
    if (entry === DB_FOLDER || (path === transcripts && hasTranscripts)) continue;
    leave(path, `${what(kindOf(path))} of OpenClaw's own, not carried`);
  }
  if (kindOf(dbDir) === "folder") {
    for (const entry of entries(dbDir)) {
      if (entry === DB_FILE) continue;
      const path = join(dbDir, entry);
      if (entry === `${DB_FILE}-wal`) leave(path, "the database's write-ahead log, not read: stop OpenClaw first, so what it holds is in the database");
      else if (entry === `${DB_FILE}-shm`) leave(path, "the database's shared memory index, OpenClaw's own");
      else leave(path, `${what(kindOf(path))} of OpenClaw's own, not carried`);
    }
  }
  const read = new SessionsRead();
  // The database is read in its folder only: through a link in its place, it could be any file of the machine's.
  const dbDirKind = kindOf(dbDir);
  if (dbDirKind !== undefined && dbDirKind !== "folder") leave(dbDir, dbDirKind === "link" ? "a symbolic link, not followed" : `${what(dbDirKind)}: no database read`);
  const dbKind = dbDirKind === "folder" ? kindOf(db) : undefined;
  if (dbKind === "file") {
    let bytes: Buffer | undefined;
    try {
      bytes = readBytes(db, OPENCLAW_DB_MAX);
    } catch (e) {
      // Left behind as a workspace file of more than one name is, the rest of the folder still read.
      if (e instanceof HardLink) leave(db, `${e.message.replace(`${db} `, "")}: not read`);
      else if (e instanceof OpenClawError) throw new OpenClawError(e.message.replace(db, rel(db)));
      else throw new OpenClawError(`${rel(db)} can't be read: ${(e as Error).message.replace(db, rel(db))}`);
    }
    if (bytes !== undefined) await readDatabase(bytes, rel(db), read);
  } else if (!hasTranscripts) {
    left.push(`sessions: none read, since ${rel(db)} is ${dbKind === undefined ? "not there" : what(dbKind)}`);
  } else if (dbKind !== undefined) leave(db, `${what(dbKind)}: not read`);
  // The transcripts OpenClaw kept before its database, sessions/<id>.jsonl: one of a session the database
  // holds, by its very id, is read from there; one whose id only makes the same thread as another's is a
  // session of its own, carried under a name of its own (SessionsRead.threadOf).
  if (hasTranscripts) {
    for (const entry of entries(transcripts)) {
      const path = join(transcripts, entry);
      const kind = kindOf(path);
      const id = entry.slice(0, -".jsonl".length);
      if (!entry.endsWith(".jsonl") || !id) leave(path, `${what(kind)} of OpenClaw's own, not a transcript: not carried`);
      else if (kind !== "file") leave(path, `${what(kind)}: not read`);
      else if (read.has(id)) leave(path, "the transcript of a session the database holds: read from the database");
      else {
        let text: string;
        try {
          text = readBytes(path, TRANSCRIPT_MAX).toString("utf8");
        } catch (e) {
          leave(path, `${(e as Error).message.replace(`${path} `, "")}: not read`);
          continue;
        }
        if (text.includes("\uFFFD")) leave(path, "not UTF-8 text: not read");
        else await readTranscript(text, id, read);
      }
    }
  }
  read.done();
  if (read.sessions.length > 0) state.sessions = read.sessions;
  left.push(...read.left);
  return { state: AspState.parse(state), left };
}

/** The workspace's identity files, memory and skills into the State; the rest of it named as left. */
function readWorkspace(workspace: string, state: AspState, leave: (path: string, why: string) => void): void {
  const identity: IdentityTexts = {};
  for (const [file, key] of IDENTITY_FILES) {
    const path = join(workspace, file);
    if (kindOf(path) === undefined) continue;
    const read = readFile(path);
    if ("why" in read) leave(path, `${read.why}: not read`);
    else if (!read.text.trim()) leave(path, "empty");
    else if (isSeeded(file, read.text)) leave(path, "OpenClaw's own default, unchanged from what it seeds: the harness's, not the agent's");
    else if (read.text.includes(BLOCK_MARK)) leave(path, `holds "${BLOCK_MARK}", the start of Link's markers: not carried`);
    else identity[key] = identity[key] === undefined ? read.text.trim() : `${identity[key]}\n\n${read.text.trim()}`;
  }
  const instructions = blockText(identity);
  if (instructions) state.instructions = instructions;

  const notes: Note[] = [];
  const note = (path: string, text: string, at: string) => {
    const parsed = Note.safeParse({ path, text, source: "openclaw" });
    if (parsed.success) notes.push(parsed.data);
    else leave(at, `not a note that can be kept: ${parsed.error.issues[0]?.message ?? "invalid"}`);
  };
  for (const file of MEMORY_FILES) {
    const path = join(workspace, file);
    if (kindOf(path) === undefined) continue;
    const read = readFile(path);
    if ("why" in read) leave(path, `${read.why}: not read`);
    else if (!read.text.trim()) leave(path, "empty");
    else note(file, read.text, path);
  }
  const memory = join(workspace, "memory");
  if (kindOf(memory) === "folder") {
    const tree = readTree(workspace, memory);
    for (const l of tree.left) leave(join(workspace, l.path), `${l.why}: not read`);
    for (const [path, text] of Object.entries(tree.files)) {
      if (!path.endsWith(".md")) leave(join(memory, path), "not a .md note: not carried");
      else if (!text.trim()) leave(join(memory, path), "empty");
      else note(`memory/${path}`, text, join(memory, path));
    }
  } else if (kindOf(memory) !== undefined) leave(memory, `${what(kindOf(memory))}: not read`);
  if (notes.length) state.memory = notes;

  const skillsDir = join(workspace, "skills");
  const skills: NonNullable<AspState["skills"]> = [];
  if (kindOf(skillsDir) === "folder") {
    for (const entry of entries(skillsDir)) {
      const path = join(skillsDir, entry);
      const kind = kindOf(path);
      if (kind !== "folder") {
        leave(path, `${what(kind)}, not a skill's folder: not carried`);
        continue;
      }
      try {
        checkThread(entry, "skill name");
      } catch {
        leave(path, "not a skill's folder name: not carried");
        continue;
      }
      let tree;
      try {
        tree = readTree(workspace, path);
      } catch (e) {
        if (!(e instanceof StoreError)) throw e;
        leave(path, `${e.message}: not carried`);
        continue;
      }
      for (const l of tree.left) leave(join(workspace, l.path), `${l.why}: not carried`);
      if (tree.files["SKILL.md"] === undefined) leave(path, "no SKILL.md: not a skill, not carried");
      else if (Object.keys(tree.files).length > TREE_LIMITS.files) leave(path, `over ${TREE_LIMITS.files} files: not carried`);
      else skills.push({ name: entry, files: tree.files });
    }
  } else if (kindOf(skillsDir) !== undefined) leave(skillsDir, `${what(kindOf(skillsDir))}: not read`);
  if (skills.length) state.skills = skills;

  // Everything else of the workspace is named: OpenClaw's own files, the agent's other work.
  const carried = new Set<string>([...IDENTITY_FILES.map(([f]) => f), ...MEMORY_FILES, "memory", "skills"]);
  for (const entry of entries(workspace)) {
    if (carried.has(entry)) continue;
    const path = join(workspace, entry);
    leave(path, `${what(kindOf(path))} of the workspace that an OpenClaw import does not carry`);
  }
}
