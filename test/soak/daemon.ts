// The daemon under the soak: one process after another on the same socket and agent folder, each
// started, waited for until it serves, and killed. Clients wait here for the next one to serve.
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { MAIN, ROOT } from "../fixtures/built.js";

export const EVERYTHING = join(ROOT, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js");

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** How much of a daemon's log is kept to explain a failure. */
const LOG_TAIL = 64 * 1024;

export class Generation {
  readonly child: ChildProcess;
  readonly exited: Promise<Exit>;
  private log = "";
  private done: Exit | undefined;
  private readonly wake = new Set<() => void>();

  constructor(
    readonly id: number,
    args: string[],
    env: NodeJS.ProcessEnv,
    /** The last one, not killed: each conversation takes one turn on it, which must be acknowledged. */
    readonly final: boolean,
  ) {
    this.child = spawn(process.execPath, [MAIN, ...args], { env, stdio: ["ignore", "ignore", "pipe"] });
    this.child.stderr?.setEncoding("utf8").on("data", (d: string) => {
      this.log = (this.log + d).slice(-LOG_TAIL);
      for (const f of [...this.wake]) f();
    });
    this.exited = new Promise((resolve) => {
      this.child.once("exit", (code, signal) => {
        this.done = { code, signal };
        for (const f of [...this.wake]) f();
        resolve(this.done);
      });
    });
  }

  stderr(): string {
    return this.log;
  }

  get alive(): boolean {
    return this.done === undefined;
  }

  /** Resolves once the daemon logs that it serves; rejects if it exits first or after `ms`. */
  serving(ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => finish(new Error(`generation ${this.id} not serving after ${ms} ms: ${this.log}`)), ms);
      const check = () => {
        if (this.log.includes('"msg":"serving ACP"')) finish();
        else if (this.done) finish(new Error(`generation ${this.id} exited (${this.done.code ?? this.done.signal}) before serving: ${this.log}`));
      };
      const finish = (e?: Error) => {
        clearTimeout(timer);
        this.wake.delete(check);
        if (e) reject(e);
        else resolve();
      };
      this.wake.add(check);
      check();
    });
  }

  /** Sends `signal` (SIGKILL unless told) and waits for the exit. */
  kill(signal: NodeJS.Signals = "SIGKILL"): Promise<Exit> {
    if (this.alive) this.child.kill(signal);
    return this.exited;
  }
}

/** Hands each client the daemon serving now, or the next one once it serves; none once the soak is over. */
export class Supervisor {
  private current: Generation | undefined;
  private over = false;
  private readonly waiters = new Set<() => void>();

  publish(gen: Generation): void {
    this.current = gen;
    this.notify();
  }

  finish(): void {
    this.over = true;
    this.notify();
  }

  private notify(): void {
    for (const f of [...this.waiters]) f();
  }

  /** The first serving generation newer than `after`; undefined once the soak is over. */
  next(after: number): Promise<Generation | undefined> {
    return new Promise((resolve) => {
      const check = () => {
        const gen = this.current;
        if (gen && gen.id > after && gen.alive) {
          this.waiters.delete(check);
          resolve(gen);
        } else if (this.over) {
          this.waiters.delete(check);
          resolve(undefined);
        }
      };
      this.waiters.add(check);
      check();
    });
  }
}
