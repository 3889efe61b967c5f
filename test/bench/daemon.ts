// The built daemon as a child process: started, watched through /proc, stopped.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { MAIN } from "../fixtures/built.js";
import { linkFreeEnv } from "../fixtures/env.js";

export interface DaemonProcess {
  readonly child: ChildProcessWithoutNullStreams;
  readonly pid: number;
  readonly exited: Promise<void>;
  stderr(): string;
  /** Resolves with the first stderr line that matches; rejects if the daemon exits first or after `ms`. */
  waitForLog(pattern: RegExp, ms?: number): Promise<string>;
  /** The first stdout line that matches, as waitForLog. */
  waitForLine(pattern: RegExp, ms?: number): Promise<string>;
  /** SIGTERM, then waits for the exit. */
  stop(): Promise<void>;
}

let nodeArgs: string[] = [];

/** Options for every daemon's Node from now on (`--cpu-prof` to profile them). */
export function setDaemonNodeArgs(args: readonly string[]): void {
  nodeArgs = [...args];
}

/** The options every daemon's Node is started with. */
export function daemonNodeArgs(): readonly string[] {
  return nodeArgs;
}

export function spawnDaemon(args: readonly string[]): DaemonProcess {
  const child = spawn(process.execPath, [...nodeArgs, MAIN, ...args], { env: linkFreeEnv(), stdio: ["pipe", "pipe", "pipe"] });
  let out = "";
  let err = "";
  const wake = new Set<() => void>();
  let gone = false;
  const exited = new Promise<void>((resolve) =>
    child.once("close", () => {
      gone = true;
      for (const f of [...wake]) f();
      resolve();
    }),
  );
  child.stdin.on("error", () => undefined);
  child.stdout.setEncoding("utf8").on("data", (d: string) => {
    out += d;
    for (const f of [...wake]) f();
  });
  child.stderr.setEncoding("utf8").on("data", (d: string) => {
    err += d;
    for (const f of [...wake]) f();
  });
  const waitIn =
    (text: () => string) =>
    (pattern: RegExp, ms = 10_000): Promise<string> =>
      new Promise((resolve, reject) => {
        const check = () => {
          const line = text()
            .split("\n")
            .slice(0, -1)
            .find((l) => pattern.test(l));
          if (line !== undefined) done(undefined, line);
          else if (gone) done(new Error(`the daemon exited before printing ${pattern}: ${err.slice(-500)}`));
        };
        const timer = setTimeout(() => done(new Error(`no ${pattern} from the daemon after ${ms} ms: ${err.slice(-500)}`)), ms);
        const done = (e: Error | undefined, line?: string) => {
          clearTimeout(timer);
          wake.delete(check);
          if (e) reject(e);
          else resolve(line ?? "");
        };
        wake.add(check);
        check();
      });
  if (child.pid === undefined) throw new Error(`cannot start ${MAIN}`);
  return {
    child,
    pid: child.pid,
    exited,
    stderr: () => err,
    waitForLog: waitIn(() => err),
    waitForLine: waitIn(() => out),
    stop: () => {
      if (!gone) child.kill("SIGTERM");
      return exited;
    },
  };
}

/** A figure of /proc/<pid>/status, in MB (VmRSS: now; VmHWM: the most since the process began). */
export function procMemory(pid: number, field: "VmRSS" | "VmHWM"): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status);
  if (!m) throw new Error(`no ${field} in /proc/${pid}/status`);
  return Number(m[1]) / 1024;
}

/** CPU time the process used so far, user and system (ms). */
export function procCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the command name, which is in parentheses and may hold spaces.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const ticks = Number(fields[11]) + Number(fields[12]);
  // Clock ticks of USER_HZ, which is 100 on Linux.
  return (ticks * 1000) / 100;
}

const INITIALIZE = `${JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: 1, clientCapabilities: {} } })}\n`;

export function initializeLine(): string {
  return INITIALIZE;
}

/** Why the daemon can't be measured, or undefined when it answers `initialize` on stdio. */
export async function daemonMissing(agentDir: string): Promise<string | undefined> {
  if (!existsSync(MAIN)) return `${MAIN} is not built`;
  const daemon = spawnDaemon(["--agent", agentDir]);
  try {
    daemon.child.stdin.write(INITIALIZE);
    await daemon.waitForLine(/"id":1,"result"/, 10_000);
    return undefined;
  } catch (e) {
    return `the daemon does not answer initialize: ${(e as Error).message.split("\n")[0] ?? ""}`;
  } finally {
    daemon.child.stdin.end();
    await daemon.stop();
  }
}
