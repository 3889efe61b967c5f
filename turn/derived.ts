// What a turn makes from an event (its count, its message) is made once per process and kept on the
// event itself, under a symbol that neither JSON nor a schema sees: an event never changes once
// written, and the store hands out one object per event. A property rather than a WeakMap, whose
// entries the garbage collector must trace on its own for each of thousands of new events.
import type { Event } from "../protocol/index.js";

/** The value kept on `event` under `key`, made by `make` the first time it is asked for. */
export function derived<T>(event: Event, key: symbol, make: () => T): T {
  const e = event as Event & { [key: symbol]: T | undefined };
  let value = e[key];
  if (value === undefined) {
    value = make();
    Object.defineProperty(e, key, { value });
  }
  return value;
}
