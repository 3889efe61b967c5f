// Names a person typed wrong: the known ones closest to it, for a message that says which was meant.

/** How many single-character edits turn `a` into `b`. */
export function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      next[j] = Math.min((row[j] ?? 0) + 1, (next[j - 1] ?? 0) + 1, (row[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    row = next;
  }
  return row[b.length] ?? 0;
}

/** The known names within `most` edits of `name` (or starting with it), the closest first. */
export function nearest(name: string, known: Iterable<string>, most = 2): string[] {
  // Bounded: a name typed far longer than any known one is near none of them.
  if (name.length > 256) return [];
  return [...new Set(known)]
    .map((k) => ({ k, d: k.startsWith(name) && name.length > 0 ? 0 : editDistance(name, k) }))
    .filter(({ d }) => d <= most)
    .sort((a, b) => a.d - b.d || a.k.localeCompare(b.k))
    .map(({ k }) => k);
}
