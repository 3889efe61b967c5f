// Logs go to stderr only, one JSON line each: stdout carries protocol messages alone.
import { format } from "node:util";

type Fields = Record<string, unknown>;

function write(level: string, msg: string, fields?: Fields): void {
  if (level === "debug" && !process.env.LNK_DEBUG) return;
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })}\n`);
}

export const log = {
  debug: (msg: string, fields?: Fields) => write("debug", msg, fields),
  info: (msg: string, fields?: Fields) => write("info", msg, fields),
  warn: (msg: string, fields?: Fields) => write("warn", msg, fields),
  error: (msg: string, fields?: Fields) => write("error", msg, fields),
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
