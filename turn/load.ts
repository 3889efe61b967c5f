// Loading what a turn (or the agent) needs when it is first needed, so that a load that failed, for
// a moment of EMFILE say, is tried again by the next request rather than kept until a restart.
// Node's ES module loader keeps a failed import under the module's URL for the process's life: an
// import of the same URL gives the same failure again. So an attempt after a failure imports the
// module under a URL of its own, `<url>?retry=<n>`: a new instance of that one module, whose own
// imports are the ones already loaded.
// What this cannot undo: a module that failed among the imports of another keeps its failure under
// its own URL, which the importer names, so a load that failed there fails until a restart.
// Free of dependencies and of daemon/: the start path (bundled) and turn/ both use it.

/**
 * What `load` gave once it succeeds, shared by every caller; an attempt that failed is not kept, so
 * the next call tries again, told how many attempts came before it.
 */
export function lazy<T>(load: (attempt: number) => Promise<T>): () => Promise<T> {
  let kept: Promise<T> | undefined;
  let attempts = 0;
  return () => {
    if (kept) return kept;
    const attempt = (async () => load(attempts++))();
    kept = attempt;
    attempt.catch(() => {
      if (kept === attempt) kept = undefined;
    });
    return attempt;
  };
}

/** The URL an attempt after a failure imports: the module's own, with `retry` in its query. */
export function retryUrl(url: string, attempt: number): string {
  const fresh = new URL(url);
  fresh.searchParams.set("retry", String(attempt));
  return fresh.href;
}

/**
 * A module imported when first needed: `first` (the caller's own `import()`, so its types and
 * resolution stay the caller's) for the first attempt, then the module's absolute URL, `url()`, as
 * a URL of its own for each attempt after a failure. `url` is `new URL("./x.js", import.meta.url).href`
 * for a file, `import.meta.resolve("package")` for a package.
 */
export function lazyImport<M>(first: () => Promise<M>, url: () => string): () => Promise<M> {
  return lazy((attempt) => (attempt === 0 ? first() : (import(retryUrl(url(), attempt)) as Promise<M>)));
}
