// Secrets taken out of what a provider or a tool says, before it is stored, sent or logged: an
// endpoint that echoes the key it refused, a tool whose stderr prints its token.
// DESIGN.md: "The key comes from the settings or the environment and is never written to an event or a log."
import type { Settings } from "../protocol/index.js";
import type { ToolSource } from "./tools.js";
import { isHighSurrogate } from "./wellformed.js";

/** What stands where a secret was. */
export const REDACTED = "[redacted]";
/** Shorter values are left alone: taking out every "true" or "1234" would mangle the text around them. */
export const MIN_SECRET = 8;

/**
 * A variable, header, parameter or flag whose name says it holds a secret: one of its words (split
 * at `_`, `-` or `.`) is `key`, `token`, `secret`, `password`… (OPENAI_API_KEY, LNK_KEY, X-Api-Key,
 * access_token, apiKey), but not a word that only holds one (npm_package_keywords).
 */
const SECRET_NAME = /(?:^|[_.-])(?:key|apikey|token|secret|password|passwd|passphrase|pass|credentials?|authorization|cookie|signature|sig)s?(?:$|[_.-])/i;
// camelCase words count as words too (accessToken, apiKey).
const isSecretName = (name: string): boolean => SECRET_NAME.test(name.replace(/([a-z0-9])([A-Z])/g, "$1_$2"));
/** A flag of a command line that takes a secret: `--api-key=X`, `--token X`. */
const isSecretFlag = (arg: string): boolean => /^--?[a-z]/i.test(arg) && isSecretName(arg.replace(/^-+/, ""));

/** The secrets a value holds: itself after `Bearer`/`Basic`, and a URL's credentials and secret parameters. */
function inValue(value: string, named: boolean): string[] {
  const out: string[] = [];
  if (named) {
    out.push(value);
    const scheme = /^(?:bearer|basic|token)\s+(\S+)$/i.exec(value.trim());
    if (scheme?.[1]) out.push(scheme[1]);
  }
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value.trim()) && URL.canParse(value.trim())) {
    const url = new URL(value.trim());
    if (url.password) out.push(url.password, decode(url.password));
    if (url.password && url.username) out.push(url.username, decode(url.username));
    for (const [k, v] of url.searchParams) if (isSecretName(k)) out.push(v);
  }
  return out;
}

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/**
 * The secrets of an environment: the value of each variable whose name says it is one (`*KEY*`,
 * `*TOKEN*`, `*SECRET*`, `*PASSWORD*`: LNK_KEY, LNK_MODEL_KEY, OPENAI_API_KEY…), and the credentials
 * of any URL it holds (LNK_TOOL_*, LNK_MEMORY, DATABASE_URL…).
 */
export function envSecrets(env: NodeJS.ProcessEnv): readonly string[] {
  const kept = frozenSecrets.get(env);
  if (kept !== undefined) return kept;
  const out: string[] = [];
  for (const [name, value] of Object.entries(env)) if (value !== undefined) out.push(...inValue(value, isSecretName(name)));
  if (Object.isFrozen(env)) frozenSecrets.set(env, Object.freeze(out));
  return out;
}

/**
 * The secrets of each frozen environment, found once: its names and values can't change. A daemon's
 * environment is frozen as it starts (daemon/agent.ts), and looking through it again for each answer
 * cost a turn some 0.02 ms after the model's last byte.
 */
const frozenSecrets = new WeakMap<object, readonly string[]>();

/** The settings' secrets: the model's key, and the credentials of the URLs they name. */
export function settingsSecrets(settings: Settings | undefined): string[] {
  if (settings === undefined) return [];
  const out = [...inValue(settings.model.base_url, false), ...Object.values(settings.tools ?? {}).flatMap((v) => inValue(v, false))];
  if (settings.model.key !== undefined) out.push(...inValue(settings.model.key, true));
  return out;
}

/** A tool's secrets: its URL's credentials, its secret headers, its secret variables and flags. */
export function sourceSecrets(source: ToolSource): string[] {
  if (source.type === "http") {
    return [...inValue(source.url, false), ...Object.entries(source.headers ?? {}).flatMap(([k, v]) => inValue(v, isSecretName(k)))];
  }
  const out = Object.entries(source.env ?? {}).flatMap(([k, v]) => inValue(v, isSecretName(k)));
  source.args.forEach((arg, i) => {
    const eq = arg.indexOf("=");
    if (eq > 0 && isSecretFlag(arg.slice(0, eq))) out.push(arg.slice(eq + 1));
    else if (isSecretFlag(arg) && i + 1 < source.args.length) out.push(source.args[i + 1] as string);
    else out.push(...inValue(arg, false));
  });
  return out;
}

/** Takes secrets out of text: each as given, and as it reads inside a URL or a JSON string. */
export class Redactor {
  private readonly pattern: RegExp | undefined;
  /** Each form a secret is looked for in, longest first. */
  readonly forms: readonly string[];

  constructor(secrets: Iterable<string>) {
    const forms = new Set<string>();
    for (const s of secrets) {
      if (s.length < MIN_SECRET) continue;
      forms.add(s);
      forms.add(encodeURIComponent(s));
      forms.add(JSON.stringify(s).slice(1, -1));
    }
    // Longest first, so a secret that holds another is taken out whole.
    this.forms = [...forms].filter((f) => f.length >= MIN_SECRET).sort((a, b) => b.length - a.length);
    this.pattern = this.forms.length ? new RegExp(this.forms.map(escape).join("|"), "g") : undefined;
  }

  /** Whether there is any secret to take out. */
  get none(): boolean {
    return this.pattern === undefined;
  }

  /**
   * `text` with the secrets that start before `before` taken out, up to where it may be handed on:
   * past the last secret taken out, and at least to `before`.
   */
  redactUpTo(text: string, before: number): { out: string; end: number } {
    const pattern = this.pattern;
    if (pattern === undefined) return { out: text.slice(0, before), end: before };
    let out = "";
    let last = 0;
    pattern.lastIndex = 0;
    for (let m = pattern.exec(text); m !== null && m.index < before; m = pattern.exec(text)) {
      out += text.slice(last, m.index) + REDACTED;
      last = m.index + m[0].length;
    }
    const end = Math.max(last, before);
    return { out: out + text.slice(last, end), end };
  }

  redact(text: string): string {
    return this.pattern ? text.replace(this.pattern, REDACTED) : text;
  }

  /** The same, through any strings of a value (log fields). */
  redactValue<T>(value: T): T {
    if (this.pattern === undefined) return value;
    if (typeof value === "string") return this.redact(value) as T;
    if (Array.isArray(value)) return value.map((v: unknown) => this.redactValue(v)) as T;
    if (value !== null && typeof value === "object") {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, this.redactValue(v)])) as T;
    }
    return value;
  }
}

/**
 * Text handed on in pieces (an answer streamed to the client) with its secrets taken out, one split
 * across pieces too: the end of what came that could begin a secret is held until the next piece
 * shows whether it does, or the end. The rest goes on at once; with no secret, every piece as it is.
 * What is handed on, joined, is the whole text as `redact` gives it.
 */
export class RedactedStream {
  private held = "";
  /** The first character of each form, so most places are passed over at a glance. */
  private readonly firsts: Set<number>;
  private readonly longest: number;

  constructor(
    private readonly secrets: Redactor,
    private readonly out: (text: string) => void,
  ) {
    this.firsts = new Set(secrets.forms.map((f) => f.charCodeAt(0)));
    this.longest = secrets.forms[0]?.length ?? 0;
  }

  push(piece: string): void {
    if (this.secrets.none) return this.out(piece);
    const text = this.held + piece;
    let from = this.start(text);
    // Never between the two halves of a character.
    if (from > 0 && isHighSurrogate(text.charCodeAt(from - 1))) from--;
    const { out, end } = this.secrets.redactUpTo(text, from);
    this.held = text.slice(end);
    if (out) this.out(out);
  }

  /** Hands on what is held: the text ended. */
  flush(): void {
    const rest = this.held;
    this.held = "";
    if (rest) this.out(this.secrets.redact(rest));
  }

  /** Where the longest end of `text` that begins a secret (but is not one whole) starts; its length if none does. */
  private start(text: string): number {
    for (let i = Math.max(0, text.length - this.longest + 1); i < text.length; i++) {
      if (!this.firsts.has(text.charCodeAt(i))) continue;
      const rest = text.length - i;
      for (const f of this.secrets.forms) if (f.length > rest && f.startsWith(text.slice(i))) return i;
    }
    return text.length;
  }
}

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

const made = new Map<string, Redactor>();

/** A redactor for these secrets, made once for each set (the environment rarely changes). */
export function redactor(...secrets: ReadonlyArray<readonly string[]>): Redactor {
  const all = [...new Set(secrets.flat().filter((s) => s.length >= MIN_SECRET))].sort();
  const id = all.join("\0");
  let r = made.get(id);
  if (r === undefined) {
    // A handful of sets in a process's life; bounded all the same.
    if (made.size >= 64) made.clear();
    r = new Redactor(all);
    made.set(id, r);
  }
  return r;
}
