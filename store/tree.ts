// A folder of the agent's read whole as text files by their paths, for a switch (a skill, its memory):
// never through a link, bounded, and what is not carried named with why.
import { lstatSync, readdirSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { StoreError } from "../protocol/index.js";
import { isErrno } from "./errno.js";
import { checkNoLinks, readText } from "./files.js";

/** The most of a folder a switch carries (man lnk-link-harness(1), "state export"). */
export const TREE_LIMITS = {
  /** One file, in bytes. */
  file: 1024 * 1024,
  /** Files of one folder, all its sub-folders counted. */
  files: 256,
  /** Folders deep. */
  depth: 8,
} as const;

export interface Tree {
  /** Each text file by its path from the folder, '/' between its parts. */
  files: Record<string, string>;
  /** What was not carried, by its path from `root`, and why. */
  left: { path: string; why: string }[];
}

/** The most bytes of a skill file's path. */
const FILE_PATH_MAX = 256;

/** Why a skill file's path is refused, or undefined: relative, plain parts, no deeper than a tree is read. */
export function filePathFault(path: string): string | undefined {
  if (Buffer.byteLength(path) > FILE_PATH_MAX) return `over ${FILE_PATH_MAX} bytes`;
  if (path.startsWith("/")) return "an absolute path";
  // eslint-disable-next-line no-control-regex
  if (/[\\\u0000-\u001f\u007f]/.test(path)) return "holds a backslash or a control character";
  // A lone surrogate has no UTF-8 form: the file system is given U+FFFD for it, so two such names are one file.
  if (/\p{Cs}/u.test(path)) return "holds a lone surrogate (half of a UTF-16 pair)";
  const parts = path.split("/");
  if (parts.some((part) => part === "" || part === "." || part === "..")) return "holds an empty part, . or ..";
  if (parts.length - 1 > TREE_LIMITS.depth) return `deeper than ${TREE_LIMITS.depth} folders`;
  return undefined;
}

/**
 * The text files of `dir` (under the agent's `root`), in the order of their paths. A link, anything
 * but a regular file, a file with more than one name, one over the limit, one that is not UTF-8 text,
 * and what lies past the depth or the count are left, each named.
 */
export function readTree(root: string, dir: string): Tree {
  checkNoLinks(root, join(dir, "x"));
  const tree: Tree = { files: Object.create(null) as Record<string, string>, left: [] };
  const leave = (path: string, why: string) => tree.left.push({ path: relative(root, path).split(sep).join("/"), why });
  const walk = (at: string, depth: number): void => {
    let entries;
    try {
      entries = readdirSync(at, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    } catch (e) {
      if (isErrno(e, "ENOENT") && at === dir) return;
      throw new StoreError(`cannot read ${at}: ${(e as Error).message}`, at);
    }
    for (const entry of entries) {
      const path = join(at, entry.name);
      if (entry.isSymbolicLink()) leave(path, "a symbolic link");
      else if (entry.isDirectory()) {
        if (depth >= TREE_LIMITS.depth) leave(path, `deeper than ${TREE_LIMITS.depth} folders`);
        else walk(path, depth + 1);
      } else if (!entry.isFile()) leave(path, "not a regular file");
      else if (Object.keys(tree.files).length >= TREE_LIMITS.files) leave(path, `past ${TREE_LIMITS.files} files`);
      else {
        let text: string | undefined;
        try {
          if (lstatSync(path).size > TREE_LIMITS.file) throw new StoreError(`over the limit of ${TREE_LIMITS.file} bytes`, path);
          text = readText(path, { max: TREE_LIMITS.file, single: true });
        } catch (e) {
          leave(path, (e as Error).message.replace(`${path} `, "").replace(/^refused: /, ""));
          continue;
        }
        if (text === undefined) continue;
        if (text.includes("\0") || text.includes("\uFFFD")) leave(path, "not UTF-8 text");
        else tree.files[relative(dir, path).split(sep).join("/")] = text;
      }
    }
  };
  walk(dir, 0);
  return tree;
}
