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
