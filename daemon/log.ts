// Logs go to stderr only, one JSON line each: stdout carries protocol messages alone.
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
