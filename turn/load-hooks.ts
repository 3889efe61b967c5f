// A hook of Node's module loader, registered by ./load.ts only once a load failed deep in a module's
// imports: it gives the module that failed, and each module that imports it on the way from the
// module imported, URLs of their own, so they load afresh while every module loaded whole is shared.
// It runs on the loader's own thread, and is told what failed by the URL of the import it serves:
// `<top>?retry=<n>&failed=<JSON list of URLs>`.
import { readFileSync } from "node:fs";
import type { ResolveHook, ResolveHookContext } from "node:module";
import { fileURLToPath } from "node:url";

type NextResolve = Parameters<ResolveHook>[2];

/** A module's URL to the URL of its own it has been given, for every later import of it. */
const fresh = new Map<string, string>();

/** The specifiers of a module's static imports and re-exports (compiled JavaScript, read plainly). */
const STATIC_IMPORT = /(?:^|[\n;}])\s*(?:import|export)\s*(?:[\w$*{}\s,]*?\bfrom\s*)?["']([^"'\n]+)["']/g;
const RETRY = /^(file:[^?#]*)\?retry=(\d+)&failed=([^#]*)$/;

/** Every module `top` imports statically, at any depth, with the modules each imports. */
async function importsOf(top: string, context: ResolveHookContext, next: NextResolve): Promise<Map<string, string[]>> {
  const graph = new Map<string, string[]>();
  const pending = [top];
  for (let url = pending.pop(); url !== undefined; url = pending.pop()) {
    if (graph.has(url)) continue;
    const children: string[] = [];
    graph.set(url, children);
    let text: string;
    try {
      text = readFileSync(fileURLToPath(url), "utf8");
    } catch {
      continue;
    }
    for (const [, specifier] of text.matchAll(STATIC_IMPORT)) {
      try {
        const child = (await next(specifier ?? "", { ...context, parentURL: url })).url;
        if (!child.startsWith("file:")) continue;
        children.push(child);
        pending.push(child);
      } catch {
        // Not a module this one imports (a word in a comment, say).
      }
    }
  }
  return graph;
}

/** Gives each failed module, and each on the way to one from `top`, a URL of its own tagged `tag`. */
async function renew(top: string, failed: readonly string[], tag: string, context: ResolveHookContext, next: NextResolve): Promise<void> {
  const importers = new Map<string, string[]>();
  for (const [url, children] of await importsOf(top, context, next)) {
    for (const child of children) importers.set(child, [...(importers.get(child) ?? []), url]);
  }
  const renewed = new Set<string>();
  for (let at = [...failed]; at.length > 0; ) {
    const url = at.pop() as string;
    if (renewed.has(url)) continue;
    renewed.add(url);
    at = at.concat(importers.get(url) ?? []);
  }
  for (const url of renewed) fresh.set(url, `${url}?retry=${tag}`);
}

export const resolve: ResolveHook = async (specifier, context, next) => {
  const retry = RETRY.exec(specifier);
  if (retry) {
    const [, top = "", tag = "", list = "[]"] = retry;
    const failed: unknown = JSON.parse(decodeURIComponent(list));
    if (Array.isArray(failed)) await renew(top, failed.filter((u): u is string => typeof u === "string"), tag, context, next);
    return next(`${top}?retry=${tag}`, context);
  }
  const resolved = await next(specifier, context);
  const renewed = fresh.get(resolved.url);
  return renewed === undefined ? resolved : { ...resolved, url: renewed };
};
