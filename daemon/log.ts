// Logs go to stderr only, one JSON line each: stdout carries protocol messages alone.
import { format } from "node:util";

type Fields = Record<string, unknown>;

/** Lines written once the event loop comes round (later), in the order they were logged. */
let pending = "";
let flushAtExit = false;

function write(level: string, msg: string, fields?: Fields, later = false): void {
  if (level === "debug" && !process.env.LNK_DEBUG) return;
  const line = `${JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })}\n`;
  if (later) {
    if (pending === "") setImmediate(flush);
    // A process that exits before the loop comes round writes them as it goes.
    if (!flushAtExit) {
      flushAtExit = true;
      process.once("exit", flush);
    }
    pending += line;
    return;
  }
  // A line logged later than one left for the loop's next pass is never written before it.
  process.stderr.write(pending === "" ? line : flushed() + line);
}

/** The lines left for the loop's next pass, taken. */
function flushed(): string {
  const text = pending;
  pending = "";
  return text;
}

function flush(): void {
  if (pending !== "") process.stderr.write(flushed());
}

export const log = {
  debug: (msg: string, fields?: Fields) => write("debug", msg, fields),
  info: (msg: string, fields?: Fields) => write("info", msg, fields),
  warn: (msg: string, fields?: Fields) => write("warn", msg, fields),
  error: (msg: string, fields?: Fields) => write("error", msg, fields),
  /**
   * Lines written once the event loop comes round, not now: off the way of what the caller does next
   * (a turn's request to its model, a prompt's response). Each line's time is now's, and no line
   * logged after it is written before it.
   */
  later: {
    info: (msg: string, fields?: Fields) => write("info", msg, fields, true),
    warn: (msg: string, fields?: Fields) => write("warn", msg, fields, true),
  },
};

/**
 * Whatever a library prints with console (the ACP SDK does, on a message it can't place) goes to the
 * log as one JSON line: never as free text on stderr, and never onto stdout, where on stdio it would
 * break the protocol.
 */
export function captureConsole(): void {
  const to = (level: "debug" | "info" | "warn") => (...args: unknown[]) => write(level, "library", { message: format(...args) });
  console.log = to("info");
  console.info = to("info");
  console.debug = to("debug");
  console.warn = to("warn");
  console.error = to("warn");
  console.trace = to("warn");
}
