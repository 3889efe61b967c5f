// Loading what a turn (or the agent) needs when it is first needed, so that a load that failed, for
// a moment of EMFILE say, is tried again by the next request rather than kept until a restart.
// Node's ES module loader keeps a failed import under the module's URL for the process's life, and
// every module that imports it fails with it: importing the same URLs again gives the same failure.
// So an attempt after a failure imports the module under a URL of its own, `<url>?retry=<n>`. When
// the failure was deeper, in a module it imports (a file the loader could not read names itself),
// that module and each module between the two get URLs of their own too: a hook of the loader
// (./load-hooks.ts), registered only then, gives them. Every module that was loaded whole is shared.
// A failure that names no file (a module that doesn't parse) is retried at the top only.
// Free of dependencies and of daemon/: the start path (bundled) and turn/ both use it.
import { pathToFileURL } from "node:url";

/** How many modules found failed, one after the other, one attempt gives URLs of their own. */
const MAX_ROUNDS = 16;

/**
 * What `load` gave once it succeeds, shared by every caller; an attempt that failed is not kept, so
 * the next call tries again, told how many attempts came before it and why the last one failed.
 */
export function lazy<T>(load: (attempt: number, failure: unknown) => Promise<T>): () => Promise<T> {
  let kept: Promise<T> | undefined;
  let attempts = 0;
  let failure: unknown;
  return () => {
    if (kept) return kept;
    const attempt = (async () => load(attempts++, failure))();
    kept = attempt;
    attempt.catch((e: unknown) => {
      failure = e;
      if (kept === attempt) kept = undefined;
    });
    return attempt;
  };
}

/** Each attempt's own tag, for the process: a URL once given is never given again. */
let tags = 0;

/** The URL an attempt after a failure imports: the module's own, with `retry` in its query. */
export function retryUrl(url: string, tag: number): string {
  const fresh = new URL(url);
  fresh.searchParams.set("retry", String(tag));
  return fresh.href;
}

/** The module (its URL, without a query) that a load failed at, when the failure names its file. */
export function failedModule(e: unknown): string | undefined {
  const path = (e as { path?: unknown } | null)?.path;
  return typeof path === "string" && /\.[cm]?js$/.test(path) ? pathToFileURL(path).href : undefined;
}

let hooked = false;

/**
 * The URL that imports `top` again with each module of `failed`, and each module between, under a
 * URL of its own: the hook of ./load-hooks.ts, registered on first need, reads the list from it.
 */
async function throughHook(top: string, failed: ReadonlySet<string>, tag: number): Promise<string> {
  if (!hooked) {
    const { register } = await import("node:module");
    // The hooks sit beside this module: in dist/turn/, as seen from it or from the bundle in dist/daemon/.
    register(new URL("../turn/load-hooks.js", import.meta.url).href);
    hooked = true;
  }
  return `${retryUrl(top, tag)}&failed=${encodeURIComponent(JSON.stringify([...failed]))}`;
}

/** Imports `top` again after `failure`, under URLs of their own for what failed (see above). */
async function importAgain(top: string, failure: unknown): Promise<unknown> {
  const failed = new Set<string>();
  let last = failure;
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const at = failedModule(last);
    // After the first round, a failure of the top, of a module just given a URL of its own, or of no
    // file is a new one, not one kept from before: the next attempt tries again.
    if (round > 0 && (at === undefined || at === top || failed.has(at))) throw last;
    if (at !== undefined && at !== top) failed.add(at);
    const tag = ++tags;
    try {
      return await import(failed.size > 0 ? await throughHook(top, failed, tag) : retryUrl(top, tag));
    } catch (e) {
      last = e;
    }
  }
  throw last;
}

/**
 * A module imported when first needed: `first` (the caller's own `import()`, so its types and
 * resolution stay the caller's) for the first attempt, then the module's absolute URL, `url()`,
 * imported again after each failure (see above). `url` is `new URL("./x.js", import.meta.url).href`
 * for a file, `import.meta.resolve("package")` for a package.
 */
export function lazyImport<M>(first: () => Promise<M>, url: () => string): () => Promise<M> {
  return lazy((attempt, failure) => (attempt === 0 ? first() : (importAgain(url(), failure) as Promise<M>)));
}
