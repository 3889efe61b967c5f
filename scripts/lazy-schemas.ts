// Schemas made when first used, not when their module loads: the bundle's build rewrites the ACP
// SDK's generated schema modules so that each `const zName = <zod expression>;` stands for the schema
// its expression makes, made the first time anything of it is asked for. The SDK makes some two
// hundred schemas as it loads, of which a connection uses the few of the methods it is sent; made
// at once they are most of what loading the agent costs a start.
//
// What stands for a schema is a Proxy over an empty object that hands every question (a property,
// `in`, its prototype, its keys) to the schema, made then: zod's schemas are plain objects whose
// methods close over the schema itself, so a method taken through it runs on the schema, and
// `instanceof` asks the schema's own traits. Generated modules only: each statement the rewrite
// takes is a `const` of a zod expression at the start of a line, ended by the first `;` outside
// brackets, strings and comments, which is what the generator writes; anything else is left as it is.
import { readFileSync } from "node:fs";
import { dirname } from "node:path";
import type { Plugin } from "esbuild";

/** Where the string, template or comment that begins at `i` ends (the index of its last character). */
function skipQuoted(source: string, i: number): number {
  const c = source[i];
  if (c === "/" && source[i + 1] === "/") {
    const end = source.indexOf("\n", i);
    return end < 0 ? source.length : end;
  }
  if (c === "/" && source[i + 1] === "*") {
    const end = source.indexOf("*/", i + 2);
    if (end < 0) throw new Error("lazy schemas: a comment is not closed");
    return end + 1;
  }
  for (let j = i + 1; j < source.length; j++) {
    if (source[j] === "\\") j++;
    else if (source[j] === c) return j;
    else if (c === "`" && source[j] === "$" && source[j + 1] === "{") throw new Error("lazy schemas: a template with a substitution is not taken");
  }
  throw new Error("lazy schemas: a string is not closed");
}

/** The index of the `;` that ends the statement whose expression begins at `start`. */
function statementEnd(source: string, start: number): number {
  let depth = 0;
  for (let i = start; i < source.length; i++) {
    const c = source[i] as string;
    if (c === '"' || c === "'" || c === "`" || (c === "/" && (source[i + 1] === "/" || source[i + 1] === "*"))) i = skipQuoted(source, i);
    else if (c === "/") throw new Error("lazy schemas: a regular expression or a division is not taken");
    else if (c === "(" || c === "[" || c === "{") depth++;
    else if (c === ")" || c === "]" || c === "}") depth--;
    else if (c === ";" && depth === 0) return i;
    if (depth < 0) throw new Error("lazy schemas: a bracket closes that never opened");
  }
  throw new Error("lazy schemas: a statement does not end");
}

/** Made once per module: the Proxy that stands for a schema made when first asked for. */
const LAZY_HELPER = `const __lazySchema = (make) => {
  let made;
  const real = () => (made ??= make());
  return new Proxy({}, {
    get: (_, key) => Reflect.get(real(), key),
    set: (_, key, value) => Reflect.set(real(), key, value),
    has: (_, key) => key in real(),
    getPrototypeOf: () => Object.getPrototypeOf(real()),
    ownKeys: () => Reflect.ownKeys(real()),
    getOwnPropertyDescriptor: (_, key) => {
      const d = Reflect.getOwnPropertyDescriptor(real(), key);
      return d && { ...d, configurable: true };
    },
  });
};
`;

/** A `const` of a schema at the start of a line: `const zName = ` or `export const zName = `. */
const SCHEMA_CONST = /^(export )?const (z[A-Z]\w*) = /gm;

/** The module with each schema's `const` made when first used; and how many were. */
export function lazySchemas(source: string): { text: string; count: number } {
  let out = "";
  let from = 0;
  let count = 0;
  for (const m of source.matchAll(SCHEMA_CONST)) {
    const start = (m.index as number) + m[0].length;
    if (start < from) throw new Error(`lazy schemas: ${m[2] as string} begins inside the statement before it`);
    const end = statementEnd(source, start);
    out += `${source.slice(from, start)}/* @__PURE__ */ __lazySchema(() => (${source.slice(start, end)}))`;
    from = end;
    count++;
  }
  if (count === 0) return { text: source, count };
  out += source.slice(from);
  // Before the first schema (an import is hoisted above it in any case).
  return { text: `${LAZY_HELPER}${out}`, count };
}

/** The ACP SDK's generated modules that make its schemas: the schemas themselves, and its guards made of them. */
export const ACP_SCHEMA_MODULES = /[\\/]@agentclientprotocol[\\/]sdk[\\/]dist[\\/]v1[\\/]schema[\\/](zod|guards)\.gen\.js$/;

/**
 * The bundle's plugin: each of the SDK's generated schema modules with its schemas made when first
 * used. A module with none to take fails the build: the SDK changed the way it writes them, and this
 * is to be looked at again.
 */
export const lazyAcpSchemas: Plugin = {
  name: "lazy-acp-schemas",
  setup(b) {
    b.onLoad({ filter: ACP_SCHEMA_MODULES }, (args) => {
      const { text, count } = lazySchemas(readFileSync(args.path, "utf8"));
      if (count === 0) throw new Error(`no schema made lazily in ${args.path}`);
      return { contents: text, loader: "js", resolveDir: dirname(args.path) };
    });
  },
};
