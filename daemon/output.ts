// Standard output for a command that prints a lot (a conversation, every conversation): written in
// chunks as they are made, waiting for the reader when the pipe is full, never one giant string.

/** How much is gathered before one write. */
const CHUNK = 64 * 1024;

export interface Output {
  /** Adds text; written once a chunk is gathered, after the reader took the last one. */
  write(text: string): Promise<void>;
  /** Writes what is left. */
  end(): Promise<void>;
}

/**
 * Standard output in chunks. A reader that goes away (`| head`) ends the process quietly, as other
 * commands do: what it asked for it has.
 */
export function stdoutChunks(stream: NodeJS.WriteStream = process.stdout): Output {
  stream.on("error", (e: NodeJS.ErrnoException) => {
    if (e.code === "EPIPE") process.exit(0);
    throw e;
  });
  let held: string[] = [];
  let size = 0;
  const flush = async (): Promise<void> => {
    if (size === 0) return;
    const text = held.join("");
    held = [];
    size = 0;
    if (!stream.write(text)) await new Promise<void>((resolve) => stream.once("drain", resolve));
  };
  return {
    async write(text) {
      held.push(text);
      size += text.length;
      if (size >= CHUNK) await flush();
    },
    end: flush,
  };
}

/** Characters that would act on a terminal, or make text read other than it is, shown as escapes. */
const UNSAFE = /[\p{Cc}\p{Cs}\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/gu;
const escape = (c: string) => `\\u{${(c.codePointAt(0) ?? 0).toString(16)}}`;

/** Text as a terminal shows it safely: lines and tabs kept, every other control character escaped. */
export function safe(text: string): string {
  return text.replace(UNSAFE, (c) => (c === "\n" || c === "\t" ? c : escape(c)));
}

/** Text on one line: a line break too is escaped. */
export function oneLine(text: string): string {
  return text.replace(UNSAFE, (c) => (c === "\n" ? "\\n" : c === "\t" ? "\\t" : escape(c)));
}
