// The agent's settings, instructions, skills and notes: read at each turn, written through the store.
import { existsSync, readdirSync, realpathSync, statSync } from "node:fs";
import { dirname, isAbsolute, join, resolve, sep } from "node:path";
import { Settings, StoreError, describeIssues, withBlock, withNotes, type Identity, type Note, type NoteKind, type Settings as SettingsT } from "../protocol/index.js";
import { checkNoLinks, isErrno, jsonFault, LIMITS, ParsedTexts, readText, replaceFile } from "./files.js";
import { checkThread, paths, type AgentRef } from "./paths.js";

export class SettingsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SettingsError";
  }
}

/**
 * Where the JSON holds a key named `__proto__`, if anywhere. zod's records pass over such a key without
 * a word, so settings holding one would be written without it: they are refused instead.
 */
export function protoKey(raw: unknown): string | undefined {
  // A stack, not recursion: the input may be nested deeper than the call stack goes.
  const stack: [unknown, string][] = [[raw, ""]];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const [value, at] = item;
    if (value === null || typeof value !== "object") continue;
    if (!Array.isArray(value) && Object.hasOwn(value, "__proto__")) return at === "" ? "(top)" : at;
    for (const [k, v] of Object.entries(value)) stack.push([v, at === "" ? k : `${at}.${k}`]);
  }
  return undefined;
}

/**
 * JSON without any key named `__proto__` (JSON.parse makes them own keys), anywhere in it: the value
 * itself when it holds none, else a copy. Recursive: for values a schema held to a depth (an event's).
 */
export function withoutProtoKeys<T>(value: T): T {
  if (protoKey(value) === undefined) return value;
  const copy = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(copy);
    if (typeof v !== "object" || v === null) return v;
    return Object.fromEntries(Object.entries(v).flatMap(([k, x]) => (k === "__proto__" ? [] : [[k, copy(x)]])));
  };
  return copy(value) as T;
}

/** Parses settings from JSON text; the error names each wrong key, never a value. */
export function parseSettings(text: string): SettingsT {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new SettingsError(`settings are not JSON: ${jsonFault(e, text)}`);
  }
  const proto = protoKey(raw);
  if (proto !== undefined) throw new SettingsError(`invalid settings: ${proto}: the key "__proto__" is not allowed`);
  const parsed = Settings.safeParse(raw);
  if (!parsed.success) throw new SettingsError(`invalid settings: ${describeIssues(parsed.error)}${keyHint(parsed.error)}`);
  settingsText(parsed.data);
  return parsed.data;
}

/** A key that other programs name otherwise (api_key, apiKey): says what this one is called. */
function keyHint(error: { issues: readonly { code: string; path: PropertyKey[]; keys?: readonly string[] }[] }): string {
  const misnamed = error.issues.some((i) => i.code === "unrecognized_keys" && i.path.join(".") === "model" && i.keys?.some((k) => /^(api[_-]?key|apikey|token|secret)$/i.test(k)));
  return misnamed ? ' (the model\'s key is named "key")' : "";
}

/** config.json's text for settings; refused over the most a turn reads, so nothing is written that can't be read. */
function settingsText(settings: SettingsT): string {
  const text = `${JSON.stringify(settings, null, 2)}\n`;
  const bytes = Buffer.byteLength(text);
  if (bytes > LIMITS.settings) {
    throw new SettingsError(`invalid settings: as config.json they take ${bytes} bytes, over the limit of ${LIMITS.settings}`);
  }
  return text;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/** The agents whose settings are kept at most: as many as a process keeps the paths of. */
const SETTINGS_KEPT = 1024;
/** The last settings parsed, per file: the same text gives the same (frozen) settings without parsing again. */
const parsedSettings = new ParsedTexts<SettingsT>(SETTINGS_KEPT);

/** Forgets the settings parsed (for measuring a fresh process). */
export function forgetSettings(): void {
  parsedSettings.clear();
}

/** The agent's settings, or undefined when it has none yet. Read whole at each call. */
export function readSettings(agent: AgentRef): SettingsT | undefined {
  const p = paths(agent);
  checkNoLinks(p.dir, p.config);
  // One name only: a config.json linked to another agent's would lend this one its key.
  const text = readText(p.config, { max: LIMITS.settings, single: true });
  if (text === undefined) return undefined;
  const known = parsedSettings.known(p.config, text);
  if (known) return known.value;
  let settings: SettingsT;
  try {
    settings = deepFreeze(parseSettings(text));
  } catch (e) {
    throw new StoreError(`${p.config}: ${(e as Error).message}`, p.config);
  }
  parsedSettings.keep(p.config, text, settings);
  return settings;
}

/** Writes config.json whole (mode 0600: it may hold the key). */
export function writeSettings(agent: AgentRef, settings: SettingsT): void {
  const checked = Settings.safeParse(settings);
  if (!checked.success) throw new SettingsError(`invalid settings: ${describeIssues(checked.error)}`);
  const p = paths(agent);
  checkNoLinks(p.dir, p.config);
  replaceFile(p.config, settingsText(checked.data), 0o600);
}

/**
 * How much of a file that becomes a section is read: enough for `chars` characters (four bytes is
 * UTF-8's longest), the rest never read, since the section is cut at its most anyway.
 */
export function sectionBytes(chars: number): number {
  return Math.max(4, chars * 4);
}

/**
 * A file the harness reads but never writes, for a section: a link refused, anything but a regular
 * file refused, a file with more than one name (a hard link) refused, and at most `bytes` read.
 */
function readSource(root: string, path: string, bytes: number, onCut?: () => void): string | undefined {
  if (!checkNoLinks(root, path)) return undefined;
  return readText(path, { max: bytes, cut: true, single: true, ...(onCut ? { onCut } : {}) });
}

/** Your standing instructions, read at each turn (at most `bytes` of them; `onCut` called when there are more). */
export function readStanding(agent: AgentRef, bytes = LIMITS.settings, onCut?: () => void): string | undefined {
  const p = paths(agent);
  return readSource(p.dir, p.instruction, bytes, onCut);
}

/**
 * What writing the identity into Link's block of instruction.md takes, checked before anything is
 * written: a function that writes it, or undefined when the file is already as it would be. The rest
 * of the file is kept byte for byte, and its mode; with no identity, a block there is taken out.
 */
export function planIdentity(agent: AgentRef, identity: Identity | undefined): (() => void) | undefined {
  const p = paths(agent);
  checkNoLinks(p.dir, p.instruction);
  const text = readText(p.instruction, { max: LIMITS.settings, single: true });
  const made = withBlock(text ?? "", identity ?? {});
  if (made === (text ?? "")) return undefined;
  const mode = text === undefined ? 0o600 : statSync(p.instruction).mode & 0o777;
  return () => replaceFile(p.instruction, made, mode);
}

/**
 * What writing notes into Link's blocks of memory/notes.md takes, checked before anything is written:
 * a function that writes it, or undefined when the file is already as it would be. The blocks of
 * `kind` become `notes` (those no longer given taken out, none added twice); the agent's own text and
 * the blocks of the other kind are kept, and the file's mode. Never through a link.
 */
export function planNotes(agent: AgentRef, kind: NoteKind, notes: readonly Note[]): (() => void) | undefined {
  const p = paths(agent);
  checkNoLinks(p.dir, p.notes);
  const text = readText(p.notes, { max: LIMITS.settings * 2, single: true });
  const made = withNotes(text ?? "", kind, notes);
  if (made === (text ?? "")) return undefined;
  if (Buffer.byteLength(made) > LIMITS.settings * 2) throw new StoreError(`${p.notes}: with the notes it would be over ${LIMITS.settings * 2} bytes`, p.notes);
  const mode = text === undefined ? 0o600 : statSync(p.notes).mode & 0o777;
  return () => replaceFile(p.notes, made, mode);
}

/** What the agent remembered (memory/notes.md; at most `bytes` of it). */
export function readNotes(agent: AgentRef, bytes = LIMITS.settings): string | undefined {
  const p = paths(agent);
  return readSource(p.dir, p.notes, bytes);
}

/** How far up from a working folder its repository is looked for. */
const REPOSITORY_DEPTH = 64;

/** The repository a folder is in: the nearest folder from it up that holds `.git` (a folder or, in a worktree, a file). */
export function repositoryOf(dir: string): string | undefined {
  if (!isAbsolute(dir)) return undefined;
  let at = resolve(dir);
  for (let depth = 0; depth < REPOSITORY_DEPTH; depth++) {
    if (existsSync(join(at, ".git"))) return at;
    const up = dirname(at);
    if (up === at) return undefined;
    at = up;
  }
  return undefined;
}

/**
 * A repository's own instructions, its AGENTS.md, at most `bytes` of it. The repository is the
 * client's workspace, not the agent's folder: a link there is followed (repositories often link
 * AGENTS.md to another name), but only a regular file is read, without waiting, and bounded.
 */
export function readRepositoryInstructions(root: string, bytes: number): string | undefined {
  return readInRepository(root, join(root, "AGENTS.md"), bytes);
}

/**
 * A file of a repository, at most `bytes` of it: a link is followed only as far as the repository
 * itself (AGENTS.md linked to CLAUDE.md, say), never out of it, where it could lead to any file this
 * process may read (a key of the user's). One that leads out, or nowhere, is as one not there: a
 * repository is someone else's, and a turn goes on without what it can't take.
 */
function readInRepository(root: string, path: string, bytes: number): string | undefined {
  let real: string;
  let top: string;
  try {
    real = realpathSync(path);
    top = realpathSync(root);
  } catch (e) {
    if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR") || isErrno(e, "ELOOP")) return undefined;
    throw new StoreError(`cannot read ${path}: ${(e as Error).message}`, path);
  }
  if (!real.startsWith(top.endsWith(sep) ? top : `${top}${sep}`)) return undefined;
  // The file it leads to, by the path it has: no link is left in it to follow.
  return readText(real, { max: bytes, cut: true });
}

/** A SKILL.md is read only for its front matter: its first 64 KiB. */
const SKILL_BYTES = 64 * 1024;

export interface Skill {
  name: string;
  /** Its folder under skills/ (its name, unless its SKILL.md names it otherwise). */
  folder: string;
  description: string;
  path: string;
  /** A repository's skill: the repository it is in (read as its AGENTS.md is, see listRepositorySkills). */
  repository?: string;
  /** A skill of the identity, read from the copy in the harness's home. */
  home?: boolean;
}

/**
 * The skills of a skills folder: each real folder (never a link) of a usable name, at most `most`,
 * with a SKILL.md that `read` gives (Agent Skills format); `read` may refuse one by throwing, which
 * fails the list, unless `onRefused` is given: then it is told, and the others are still read.
 */
function skillsIn(
  dir: string,
  read: (path: string) => string | undefined,
  o: { most?: number; repository?: string; onRefused?: (path: string, why: string) => void } = {},
): Skill[] {
  let names: string[];
  try {
    names = readdirSync(dir, { withFileTypes: true })
      .filter((d) => d.isDirectory() && !d.isSymbolicLink())
      .map((d) => d.name)
      .sort()
      .slice(0, o.most);
  } catch (e) {
    if (isErrno(e, "ENOENT") || (o.repository !== undefined && isErrno(e, "ENOTDIR"))) return [];
    throw e;
  }
  const skills: Skill[] = [];
  for (const name of names) {
    try {
      checkThread(name, "skill name");
    } catch {
      continue;
    }
    const path = join(dir, name, "SKILL.md");
    let text: string | undefined;
    try {
      text = read(path);
    } catch (e) {
      // One skill of a repository that can't be read (a FIFO, say) leaves the others.
      if (o.onRefused === undefined) throw e;
      o.onRefused(path, (e as Error).message);
      continue;
    }
    if (text === undefined) continue;
    skills.push({
      name: frontmatter(text, "name") ?? name,
      folder: name,
      description: frontmatter(text, "description") ?? "",
      path,
      ...(o.repository !== undefined ? { repository: o.repository } : {}),
    });
  }
  return skills;
}

/**
 * The skills the agent made: each folder of skills/ with a SKILL.md (Agent Skills format). A SKILL.md
 * that can't be read (a link, a FIFO) fails the list, unless `onRefused` is given: then it is told
 * of it, and the others are listed.
 */
export function listOwnSkills(agent: AgentRef, onRefused?: (path: string, why: string) => void): Skill[] {
  const p = paths(agent);
  // skills/ itself is checked too: a link there would reach SKILL.md files anywhere.
  if (!checkNoLinks(p.dir, `${p.skills}/x`)) return [];
  return skillsIn(p.skills, (path) => readSource(p.dir, path, SKILL_BYTES), onRefused ? { onRefused } : {});
}

/**
 * The agent's skills: its own, then each the settings' identity names that Link copied to
 * <home>/.lnk/agent/skills/<name>/, offered like its own (one of its own of that name wins). From
 * `settings` when the caller has read them (a turn, once), else read here.
 */
export function listSkills(agent: AgentRef, settings?: SettingsT): Skill[] {
  const own = listOwnSkills(agent);
  let named: readonly string[] | undefined;
  try {
    named = (settings ?? readSettings(agent))?.identity?.skills;
  } catch {
    // Settings that can't be read fail the turn, saying why; the agent's own skills are still its own.
    return own;
  }
  if (!named?.length) return own;
  const p = paths(agent);
  checkNoLinks(p.home, `${p.identitySkills}/x`);
  const taken = new Set(own.map((s) => s.folder));
  const wanted = new Set(named);
  const copied = skillsIn(p.identitySkills, (path) => readSource(p.home, path, SKILL_BYTES)).filter((s) => wanted.has(s.folder) && !taken.has(s.folder));
  return [...own, ...copied.map((s) => ({ ...s, home: true }))];
}

/** A skill's SKILL.md, whole (at most its limit), read as every source of the prompt is: never through a link. */
export function readSkill(agent: AgentRef, skill: Skill): string | undefined {
  if (skill.repository !== undefined) return readInRepository(skill.repository, skill.path, SKILL_BYTES);
  const p = paths(agent);
  return readSource(skill.home ? p.home : p.dir, skill.path, SKILL_BYTES);
}

/** Where a repository keeps its skills, as the agent tools that read Agent Skills name it. */
export const REPOSITORY_SKILLS = join(".agents", "skills");
/** The most skills of a repository read: it is someone else's, and may hold any number. */
const REPOSITORY_SKILLS_MAX = 64;

/**
 * A repository's skills: each folder of its .agents/skills/ with a SKILL.md. The repository is the
 * client's workspace, not the agent's folder: its skills' folders are real folders (a link is
 * skipped), and each SKILL.md a regular file read without waiting and bounded, as its AGENTS.md is.
 */
export function listRepositorySkills(root: string): Skill[] {
  return skillsIn(join(root, REPOSITORY_SKILLS), (path) => readInRepository(root, path, SKILL_BYTES), {
    most: REPOSITORY_SKILLS_MAX,
    repository: root,
    onRefused: () => undefined,
  });
}

/** One key of a SKILL.md's YAML front matter (plain `key: value` lines). */
function frontmatter(text: string, key: string): string | undefined {
  const m = /^---\r?\n([\s\S]*?)\r?\n---/.exec(text);
  if (!m?.[1]) return undefined;
  for (const line of m[1].split(/\r?\n/)) {
    const kv = /^([A-Za-z_-]+):\s*(.*)$/.exec(line);
    if (kv?.[1] === key) return kv[2]?.replace(/^["']|["']$/g, "").trim();
  }
  return undefined;
}
