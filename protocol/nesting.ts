// How deep a value parsed from JSON nests: V8 writes JSON back by recursion, and runs out of stack
// some thousands of arrays and objects deep.

/** Whether `value` nests no deeper than `max` arrays and objects: walked with a stack of its own, not by recursion. */
export function nestsWithin(value: unknown, max: number): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    const [v, depth] = top;
    if (v === null || typeof v !== "object") continue;
    if (depth >= max) return false;
    for (const item of Array.isArray(v) ? v : Object.values(v)) stack.push([item, depth + 1]);
  }
  return true;
}
