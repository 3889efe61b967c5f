// Maps held to a bound, the entry used least lately let go first: a Map's own order (that of its
// keys' insertion) is kept as the order of use by putting an entry back at its end each time.

/** Puts `value` at `key` as the entry used most lately; past `max` entries, lets go of those used least lately. */
export function keepRecent<K, V>(map: Map<K, V>, key: K, value: V, max: number): void {
  map.delete(key);
  map.set(key, value);
  for (const oldest of map.keys()) {
    if (map.size <= max) break;
    map.delete(oldest);
  }
}

/** The value at `key`, now the entry used most lately; undefined when none is kept. */
export function useRecent<K, V>(map: Map<K, V>, key: K): V | undefined {
  const value = map.get(key);
  if (value !== undefined) {
    map.delete(key);
    map.set(key, value);
  }
  return value;
}

/** The value at `key`, now the entry used most lately; made by `make` and kept there (keepRecent) when none is. */
export function recentOr<K, V>(map: Map<K, V>, key: K, max: number, make: () => V): V {
  let value = useRecent(map, key);
  if (value === undefined) {
    value = make();
    keepRecent(map, key, value, max);
  }
  return value;
}

/**
 * A map held to a number of entries and to a total size its entries are given with, the entry used
 * least lately let go first; an entry larger than the whole bound is not kept at all.
 */
export class SizedRecent<K, V> {
  private readonly map = new Map<K, { value: V; size: number }>();
  private total = 0;

  constructor(
    private readonly maxEntries: number,
    private readonly maxSize: number,
  ) {}

  get(key: K): V | undefined {
    return this.map.get(key)?.value;
  }

  delete(key: K): void {
    const entry = this.map.get(key);
    if (entry === undefined) return;
    this.map.delete(key);
    this.total -= entry.size;
  }

  /** Puts `value` of `size` at `key` as the entry used most lately, then lets go of the least used while over a bound. */
  set(key: K, value: V, size: number): void {
    this.delete(key);
    if (size > this.maxSize) return;
    this.map.set(key, { value, size });
    this.total += size;
    for (const [oldest, entry] of this.map) {
      if (this.map.size <= this.maxEntries && this.total <= this.maxSize) break;
      this.map.delete(oldest);
      this.total -= entry.size;
    }
  }

  clear(): void {
    this.map.clear();
    this.total = 0;
  }

  /** The sizes of the entries kept, together. */
  get held(): number {
    return this.total;
  }
}
