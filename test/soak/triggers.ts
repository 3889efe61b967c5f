// When the soak kills the daemon: on something seen happen (a request reaching the model, a call
// starting, a call answered, a turn acknowledged) plus a random delay within how long that stage
// lasts, so kills land mid-stream, mid-call, between events and as a turn begins.
import type { Rng } from "./rng.js";

export type Seen = "request" | "call" | "answer" | "ack";

export const TRIGGERS = {
  /** As clients connect, initialize and resume. */
  start: { on: undefined, within: 150 },
  /** While the model's reply streams. */
  request: { on: "request", within: 0 },
  /** While the tool's session starts and the call runs. */
  call: { on: "call", within: 400 },
  /** Between a call's answer event and the next request. */
  answer: { on: "answer", within: 15 },
  /** As a later turn begins (after one to four turns): its message, its lock, its history. */
  ack: { on: "ack", within: 30, times: 4 },
  /** Any time. */
  random: { on: undefined, within: 4000 },
} as const satisfies Record<string, { on: Seen | undefined; within: number; times?: number }>;
export type Trigger = keyof typeof TRIGGERS;
export const TRIGGER_NAMES = Object.keys(TRIGGERS) as Trigger[];

/** What was seen, each with how long the stage it starts lasts (ms). */
export class Bus {
  private readonly waiters = new Set<{ on: Seen; resolve: (within: number) => void }>();

  emit(seen: Seen, within = 0): void {
    for (const w of [...this.waiters]) {
      if (w.on !== seen) continue;
      this.waiters.delete(w);
      w.resolve(within);
    }
  }

  /** The stage's length when `seen` next happens; undefined if it doesn't within `ms`. */
  next(seen: Seen, ms: number): Promise<number | undefined> {
    return new Promise((resolve) => {
      const waiter = {
        on: seen,
        resolve: (within: number) => {
          clearTimeout(timer);
          resolve(within);
        },
      };
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        resolve(undefined);
      }, ms);
      this.waiters.add(waiter);
    });
  }
}

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Waits for the trigger's moment: what it waits to see (at most `patience` ms), then a random delay
 * within its stage. Returns whether the moment came, or the patience ran out first.
 */
export async function awaitTrigger(trigger: Trigger, bus: Bus, rng: Rng, patience: number): Promise<boolean> {
  const t = TRIGGERS[trigger];
  let within: number = t.within;
  if (t.on !== undefined) {
    const times = "times" in t ? 1 + rng.int(t.times) : 1;
    const until = Date.now() + patience;
    for (let i = 0; i < times; i++) {
      const seen = await bus.next(t.on, until - Date.now());
      if (seen === undefined) return false;
      within = Math.max(within, seen);
    }
  }
  // The delay is the point: it places the kill at a random moment of the stage.
  await delay(rng.int(within + 1));
  return true;
}
