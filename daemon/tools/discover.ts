// Which tools an agent has: Link's bridge names them in the environment, the settings may add some,
// and an ACP client may bring its own MCP servers (session/new mcpServers).
// Spec: "As an MCP client of the servers Link's tool bridge already runs ($LNK_TOOL_<NAME>, and memory at $LNK_MEMORY)".
import type { ToolServer, ToolSource } from "../../turn/tools.js";
import { MEMORY_TOOL, TOOL_SEPARATOR } from "../../turn/tools.js";
import { log } from "../log.js";

const TOOL_PREFIX = "LNK_TOOL_";
const MEMORY_VAR = "LNK_MEMORY";
/** Long enough for any real name, short enough that `<tool>__<call>` stays within providers' limits. */
const MAX_NAME = 32;

interface NameValue {
  name: string;
  value: string;
}

/** An entry of ACP `session/new` `mcpServers` (the ACP SDK's McpServer has this shape). */
export type AcpMcpServer =
  | { type?: undefined; name: string; command: string; args: string[]; env: NameValue[] }
  | { type: "http" | "sse"; name: string; url: string; headers: NameValue[] };

export interface DiscoverExtra {
  /** The settings' `tools`: name → URL or command line. */
  settings?: Record<string, string>;
  /** The conversation's own MCP servers from ACP. */
  acp?: readonly AcpMcpServer[];
}

/**
 * The tools of a turn, sorted by name so they are offered the same way every turn. The first source
 * that names a tool wins: LNK_MEMORY, then LNK_TOOL_*, then the settings, then ACP. An entry that is
 * not valid is left out with a warning.
 */
export function discoverTools(env: NodeJS.ProcessEnv, extra: DiscoverExtra = {}): ToolServer[] {
  const found = new Map<string, ToolServer>();
  /** `source` is where the tool is, or why it can't be used. */
  const add = (origin: string, rawName: string, source: ToolSource | string): void => {
    const name = toolName(rawName);
    if (name === undefined) return skip(origin, `"${rawName}" is not a usable tool name`);
    if (found.has(name)) return skip(origin, `tool ${name} is already named by an earlier source`);
    if (typeof source === "string") return skip(origin, source);
    found.set(name, { name, source });
  };

  const memory = env[MEMORY_VAR];
  if (memory !== undefined) add(MEMORY_VAR, MEMORY_TOOL, parseSource(memory));
  for (const key of Object.keys(env).sort()) {
    const value = env[key];
    if (key.startsWith(TOOL_PREFIX) && value !== undefined) add(key, key.slice(TOOL_PREFIX.length), parseSource(value));
  }
  for (const [name, value] of Object.entries(extra.settings ?? {})) add(`settings tools.${name}`, name, parseSource(value));
  for (const server of extra.acp ?? []) add(`ACP mcpServers ${server.name}`, server.name, acpSource(server));

  return [...found.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/**
 * A URL that doesn't parse, as a log line may show it: its scheme, host and path, never what stands
 * before an `@` (a user and a password) or after a `?` or `#` (a key in a query).
 */
function shownUrl(text: string): string {
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(text.trim())?.[0];
  if (scheme === undefined) return "(a URL not shown)";
  // After the last `@`, if any: a password may hold `/`, `?`, `#` or `@` itself, unescaped.
  const rest = text.trim().slice(scheme.length);
  const at = rest.lastIndexOf("@");
  return `${scheme}${(at >= 0 ? rest.slice(at + 1) : rest).split(/[?#]/)[0] ?? ""}`.slice(0, 200);
}

function skip(origin: string, why: string): void {
  log.warn("tool left out", { origin, why });
}

/** Lower-case `[a-z0-9_-]`, other characters as `_`; undefined when empty, too long or holding `__`. */
export function toolName(raw: string): string | undefined {
  const name = raw
    .toLowerCase()
    .replace(/[^a-z0-9_-]/g, "_")
    .replace(/^[_-]+|[_-]+$/g, "");
  if (name.length === 0 || name.length > MAX_NAME || name.includes(TOOL_SEPARATOR)) return undefined;
  return name;
}

/** An `http(s)://` URL (Streamable HTTP) or a command line to spawn over stdio; a string says why not. */
export function parseSource(text: string): ToolSource | string {
  const trimmed = text.trim();
  if (trimmed === "") return "its value is empty";
  if (/^https?:\/\//i.test(trimmed)) {
    if (!URL.canParse(trimmed)) return `"${shownUrl(trimmed)}" is not a valid URL`;
    return { type: "http", url: trimmed };
  }
  const words = splitCommandLine(trimmed);
  if (typeof words === "string") return words;
  const [command, ...args] = words;
  if (command === undefined || command === "") return "its command line names no command";
  return { type: "stdio", command, args };
}

/**
 * Splits a command line the way a POSIX shell splits words, without running one: whitespace
 * separates words, single quotes keep everything, double quotes keep all but `\"`, `\\`, `\$` and
 * `` \` ``, and a backslash outside quotes keeps the next character. No variables, globs or
 * redirections. Returns why when a quote is left open.
 */
export function splitCommandLine(line: string): string[] | string {
  const words: string[] = [];
  let word = "";
  let inWord = false;
  let i = 0;
  while (i < line.length) {
    const c = line[i] as string;
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) return "its command line leaves a single quote open";
      word += line.slice(i + 1, end);
      inWord = true;
      i = end + 1;
    } else if (c === '"') {
      let j = i + 1;
      for (;;) {
        if (j >= line.length) return "its command line leaves a double quote open";
        const d = line[j] as string;
        if (d === '"') break;
        const next = line[j + 1];
        if (d === "\\" && next !== undefined && '"\\$`'.includes(next)) {
          word += next;
          j += 2;
        } else {
          word += d;
          j += 1;
        }
      }
      inWord = true;
      i = j + 1;
    } else if (c === "\\") {
      const next = line[i + 1];
      if (next === undefined) return "its command line ends with a backslash";
      if (next !== "\n") word += next;
      inWord = true;
      i += 2;
    } else if (/\s/.test(c)) {
      if (inWord) words.push(word);
      word = "";
      inWord = false;
      i += 1;
    } else {
      word += c;
      inWord = true;
      i += 1;
    }
  }
  if (inWord) words.push(word);
  return words;
}

function acpSource(server: AcpMcpServer): ToolSource | string {
  if (server.type === undefined) {
    if (typeof server.command !== "string" || server.command === "") return "it names no command";
    return { type: "stdio", command: server.command, args: [...(server.args ?? [])], env: pairs(server.env) };
  }
  if (server.type === "http") {
    if (!/^https?:\/\//i.test(server.url) || !URL.canParse(server.url)) return `"${shownUrl(server.url)}" is not an http(s) URL`;
    return { type: "http", url: server.url, headers: pairs(server.headers) };
  }
  // Link Harness advertises MCP over HTTP, not the older SSE transport.
  return `its transport ${server.type} is not supported`;
}

function pairs(list: readonly NameValue[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const { name, value } of list ?? []) out[name] = value;
  return out;
}
