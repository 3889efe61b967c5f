// The Headers of fetch, for the model's requests and their answers (turn/http.ts), and for the
// openai client's own building of a request, which the agent's bundle points at this class in place
// of Node's (scripts/bundle.ts). Node's Headers is undici's: its first use loads the whole of fetch,
// 20 to 30 ms of a start that the first turn waited for, where this is a map of a few names.
// As fetch's: names compared without case, values of one name joined by ", " (set-cookie's kept
// apart), leading and trailing whitespace trimmed, an invalid name or value a TypeError; listed by
// name, in order.

/** A header's name: an HTTP token. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** What a value may not hold once trimmed: NUL, CR, LF, or a character that is not one byte. */
const FORBIDDEN = /[\0\r\n]|[^\0-\u00ff]/;
const EDGES = /^[\t\n\r ]+|[\t\n\r ]+$/g;

function checkedName(name: string): string {
  const text = String(name);
  if (!TOKEN.test(text)) throw new TypeError(`invalid header name: ${JSON.stringify(text)}`);
  return text.toLowerCase();
}

function checkedValue(value: string): string {
  const text = String(value).replace(EDGES, "");
  if (FORBIDDEN.test(text)) throw new TypeError("invalid header value: it holds a NUL, CR, LF or a character over 255");
  return text;
}

function isPairs(init: object): init is Iterable<readonly unknown[]> {
  return Symbol.iterator in init;
}

export class FetchHeaders implements Headers {
  /** Each name, in lower case, with its values in the order added. */
  private readonly byName = new Map<string, string[]>();

  constructor(init?: HeadersInit) {
    if (init === undefined || init === null) return;
    if (typeof init !== "object") throw new TypeError("headers must be an object, pairs or Headers");
    if (isPairs(init)) {
      for (const pair of init) {
        if (pair.length !== 2) throw new TypeError("a header pair must be a name and a value");
        this.append(String(pair[0]), String(pair[1]));
      }
      return;
    }
    for (const [name, value] of Object.entries(init)) this.append(name, String(value));
  }

  append(name: string, value: string): void {
    const key = checkedName(name);
    const text = checkedValue(value);
    const list = this.byName.get(key);
    if (list) list.push(text);
    else this.byName.set(key, [text]);
  }

  set(name: string, value: string): void {
    this.byName.set(checkedName(name), [checkedValue(value)]);
  }

  delete(name: string): void {
    this.byName.delete(checkedName(name));
  }

  get(name: string): string | null {
    return this.byName.get(checkedName(name))?.join(", ") ?? null;
  }

  getSetCookie(): string[] {
    return [...(this.byName.get("set-cookie") ?? [])];
  }

  has(name: string): boolean {
    return this.byName.has(checkedName(name));
  }

  forEach(callback: (value: string, key: string, parent: Headers) => void, thisArg?: unknown): void {
    for (const [name, value] of this.entries()) callback.call(thisArg, value, name, this);
  }

  *entries(): IterableIterator<[string, string]> {
    for (const name of [...this.byName.keys()].sort()) {
      const list = this.byName.get(name) as string[];
      // Each cookie set is its own entry: they can't be joined with a comma.
      if (name === "set-cookie") for (const value of list) yield [name, value];
      else yield [name, list.join(", ")];
    }
  }

  *keys(): IterableIterator<string> {
    for (const [name] of this.entries()) yield name;
  }

  *values(): IterableIterator<string> {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return "Headers";
  }
}
