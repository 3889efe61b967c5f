// What a turn makes from an event (its count, its message) is made once per process and kept on the
// event itself: an event never changes once written, and the store hands out one object per event.
// Kept in a private field, which neither JSON, a schema, a spread nor a test's deep equality sees,
// and which a copy of the event does not carry: not in a WeakMap, whose entries the garbage collector
// must trace on its own for each of thousands of new events, nor in a property defined with
// Object.defineProperty, a call into the runtime that cost a fresh turn of 2,000 events 0.4 ms.
import type { Event } from "../protocol/index.js";

/** What is kept of an event, by name. */
export type Kept = Partial<Record<"tokens" | "message" | "chars", unknown>>;

/**
 * A base whose constructor returns the object it is given, so that a subclass's constructor adds its
 * private fields to that object: the language's one way to give an object it did not make a field
 * nothing else can see.
 */
class Returning {
  constructor(target: object) {
    return target;
  }
}

class Stamp extends Returning {
  readonly #kept: Kept = {};

  /** The event's kept values, given a place for them the first time. */
  static of(event: object): Kept {
    if (!(#kept in event)) new Stamp(event);
    return (event as Stamp).#kept;
  }
}

/** The value kept on `event` as `name`, made by `make` the first time it is asked for. */
export function derived<T>(event: Event, name: keyof Kept, make: () => T): T {
  const kept = Stamp.of(event);
  let value = kept[name] as T | undefined;
  if (value === undefined) {
    value = make();
    kept[name] = value;
  }
  return value;
}
