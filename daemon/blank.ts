// --blank CONTROL: a process started ahead, holding nothing of anyone's (spec: contract.txt "blank",
// DESIGN.md "Starting blank"). It loads no agent and answers on no endpoint: it listens on the Unix
// socket CONTROL (0600 from the moment it exists) for one line of Bind, and once bound serves that
// agent alone, on stdio or on --socket/--port. A Bind refused leaves it blank, able to be bound; a
// second Bind is refused, and nothing unbinds it. The Bind's settings and key are held in memory only.
import { lstatSync } from "node:fs";
import { isAbsolute } from "node:path";
import type { Socket } from "node:net";
import type { Readable, Writable } from "node:stream";
import { Bind, Settings, describeIssues, type Settings as SettingsT } from "../protocol/index.js";
import type { AgentRef } from "../store/paths.js";
import type { Command } from "./cli.js";
import { log } from "./log.js";
import type { Process, Served, Target } from "./serve.js";

/** The longest Bind line read, in bytes: settings of 1 MiB (configure's own bound) and room around them. */
export const BIND_MAX = 2 * 1024 * 1024;
/** How long a control connection may send nothing of its line before it is closed. */
const CONTROL_IDLE_MS = 60_000;
/**
 * Prompts of a scratch agent a blank process runs while it waits (daemon/warm.ts), fewer if a Bind
 * comes first: enough for V8 to have compiled the code a prompt runs most (Bind to first answer
 * about a tenth sooner than after one warm-up prompt), for some tenths of a second of a process
 * started ahead.
 */
export const WARM_PROMPTS = 40;
/**
 * Over this many connections, each a session of its own, five prompts each: a bound agent's first
 * connection, initialize, session/new and a new conversation's first turn run code warmed as often
 * (the Bind about 1 to 2 ms sooner than over one).
 */
export const WARM_CONNECTIONS = 8;
/** What stands in the settings for a secret: filled from the Bind's key. */
export const KEY_PLACEHOLDER = "$LNK_KEY";
/** How many times a blank process reads a Bind of no one (NO_ONES_BIND) before it says it is loaded. */
const BIND_WARM_READS = 5;
/** A Bind of no one, read as a Bind is: its key filled in its settings, its folder the root (one, and no link). */
const NO_ONES_BIND = JSON.stringify({
  agent: { name: "n", id: "i", owner: "o" },
  key: "k",
  settings: { model: { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1", key: KEY_PLACEHOLDER } },
  store: "/",
});

/** A Bind refused: its answer's error, in words a person can act on, never quoting what was sent. */
class BindRefused extends Error {}

/** `v` with every placeholder filled from the key, wherever a string holds one. */
function fill(v: unknown, key: string): unknown {
  if (typeof v === "string") return v.split(KEY_PLACEHOLDER).join(key);
  if (Array.isArray(v)) return v.map((x) => fill(x, key));
  if (typeof v === "object" && v !== null) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fill(x, key)]));
  return v;
}

/** The settings with every placeholder filled from the key, checked: what a turn is given. */
export function fillSecrets(settings: SettingsT, key: string): SettingsT {
  const filled = Settings.safeParse(fill(settings, key));
  if (!filled.success) throw new BindRefused(`settings: once the key is filled in: ${describeIssues(filled.error)}`);
  return filled.data;
}

/**
 * The Bind's settings as the process holds them: with their placeholders, never the key (a dump of
 * them, by a log line or a core file, holds none), filled anew for each use; checked filled once,
 * as the Bind is taken, so each fill after gives settings as valid.
 */
function heldSettings(settings: SettingsT, key: string): () => SettingsT {
  fillSecrets(settings, key);
  return () => fill(settings, key) as SettingsT;
}

/** A folder the Bind names: an absolute path to a folder that exists, never a link. */
function folder(what: string, path: string): string {
  if (!isAbsolute(path)) throw new BindRefused(`${what}: not an absolute path`);
  let st;
  try {
    st = lstatSync(path);
  } catch (e) {
    throw new BindRefused(`${what}: ${(e as NodeJS.ErrnoException).code === "ENOENT" ? "does not exist" : (e as Error).message}`);
  }
  if (st.isSymbolicLink()) throw new BindRefused(`${what}: is a symbolic link, which is never followed`);
  if (!st.isDirectory()) throw new BindRefused(`${what}: is not a folder`);
  return path;
}

/** Reads a Bind line: the agent, its folders and its settings, the key filled in. */
export function readBind(line: string): { agent: AgentRef; names: string[]; key: string; settings: () => SettingsT; name: string } {
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch {
    throw new BindRefused("the line is not JSON: one line of Bind is {\"agent\", \"key\", \"settings\", \"store\"?, \"files\"?}");
  }
  const parsed = Bind.safeParse(json);
  if (!parsed.success) throw new BindRefused(`not a Bind: ${describeIssues(parsed.error)}`);
  const b = parsed.data;
  if (b.key.includes(KEY_PLACEHOLDER)) throw new BindRefused(`key: may not hold the placeholder ${KEY_PLACEHOLDER}`);
  if (b.store === undefined && b.files === undefined) throw new BindRefused("names neither store nor files: the agent's folder is where its conversations are kept");
  const store = folder("store", b.store ?? (b.files as string));
  const files = b.files !== undefined ? folder("files", b.files) : store;
  return { agent: { dir: store, files }, names: [b.agent.name, b.agent.id], key: b.key, settings: heldSettings(b.settings, b.key), name: b.agent.name };
}

/** Reads one line from the connection, at most BIND_MAX bytes; undefined when it ends with nothing sent or is over the bound. */
function oneLine(socket: Socket): Promise<{ line?: string; over?: boolean }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (r: { line?: string; over?: boolean }) => {
      socket.off("data", onData);
      clearTimeout(idle);
      resolve(r);
    };
    const onData = (chunk: Buffer) => {
      const nl = chunk.indexOf(0x0a);
      const part = nl >= 0 ? chunk.subarray(0, nl) : chunk;
      size += part.length;
      if (size > BIND_MAX) return done({ over: true });
      chunks.push(part);
      if (nl >= 0) done({ line: Buffer.concat(chunks).toString("utf8") });
    };
    const idle = setTimeout(() => done({}), CONTROL_IDLE_MS);
    socket.on("data", onData);
    // A line its client ended its side after, with no newline (printf without \n, say), is still
    // the line: it is answered, where the connection was closed with no word.
    socket.once("end", () => done(size > 0 ? { line: Buffer.concat(chunks).toString("utf8") } : {}));
    socket.once("close", () => done({}));
    socket.once("error", () => done({}));
  });
}

export async function serveBlank(p: Process, command: Extract<Command, { kind: "serve" }>): Promise<void> {
  const control = command.blank as string;
  let bound: Served | undefined;
  let binding = false;

  /** The Bind's answer, and, for one taken, what it does once that answer is written. */
  type Taken = { answer: Record<string, never> | { error: string }; after?: () => void };
  const refused = (error: string): Taken => ({ answer: { error } });

  const bind = async (line: string): Promise<Taken> => {
    if (bound) return refused("bound already: a second Bind is refused, and nothing unbinds this process");
    if (binding) return refused("another Bind is being taken: this one is refused");
    binding = true;
    try {
      const b = readBind(line);
      const served = p.add({ agent: b.agent, names: b.names, key: b.key, settings: b.settings });
      const fields = { agent: b.name };
      const before = p.endpoints;
      try {
        if (command.socket) await p.serveSocket(command.socket, p.oneAgent(served), fields);
        if (command.port !== undefined) await p.servePort(command.port, p.oneAgent(served), fields);
      } catch (e) {
        p.drop(served);
        p.closeSince(before);
        throw new BindRefused((e as Error).message);
      }
      // On stdio, where nothing more can fail, the connection is made once the answer is out (after),
      // while its client reads it: what stdin brings meanwhile waits in the pipe.
      const onStdio = !command.socket && command.port === undefined;
      bound = served;
      log.info("bound", fields);
      // Once the answer is written (onControl): what its first turn asks of its model is asked (its
      // connection opened ahead), and the agent is made, while its client reads the answer and
      // connects. A new conversation's first request needs no answer of them (turn/turn.ts): only
      // its answer waits. Both once the event loop has come round: stdin is read first, should its
      // client's first lines be there (making the asks' connections takes a millisecond or two).
      const after = () => {
        if (onStdio) p.serveStdio(p.oneAgent(served), fields, true);
        setImmediate(() => {
          void p
            .agentCode()
            .then((code) => code.readyAhead(b.settings()))
            .catch(() => undefined);
          served.load().catch((e: unknown) => log.warn("loading the agent failed: the first connection tries again", { error: (e as Error).message }));
        });
      };
      return { answer: {}, after };
    } catch (e) {
      if (e instanceof BindRefused) {
        log.warn("a Bind was refused: the process stays blank", { error: e.message });
        return refused(e.message);
      }
      log.error("a Bind failed: the process stays blank", { error: (e as Error).message });
      return refused(`the Bind failed: ${(e as Error).message}`);
    } finally {
      binding = false;
    }
  };

  const onControl = (socket: Socket) => {
    socket.on("error", (e) => log.warn("control connection error", { error: e.message }));
    void (async () => {
      const { line, over } = await oneLine(socket);
      if (line === undefined && !over) {
        socket.destroy();
        return;
      }
      const taken = over ? refused(`the Bind line is over ${BIND_MAX} bytes`) : await bind(line as string);
      // The rest of the Bind's work waits for its answer to be out (or to have failed), not the other way.
      socket.end(`${JSON.stringify(taken.answer)}\n`, () => taken.after?.());
    })();
  };
  await p.serveControl(control, onControl);
  log.info("blank: waiting for a Bind", { control });
  // The code a first turn runs is loaded while it waits, so the Bind's first prompt waits for none.
  try {
    // What reads a Bind (its schema, compiled on its first use; the settings filled and checked; the
    // folder looked at) runs on a Bind of no one, a few times: the first Bind read takes 1.5 ms, one
    // read after these some 0.4.
    for (let i = 0; i < BIND_WARM_READS; i++) readBind(NO_ONES_BIND).settings();
    // Its connection is served as the bound agent's will be: through the front, over Node's streams.
    const serve = (input: Readable, output: Writable, target: Target) => p.serveStreams(input, output, target);
    const warmed = await (await p.agentCode()).preload({ prompts: WARM_PROMPTS, enough: () => bound !== undefined, serve, connections: WARM_CONNECTIONS, collect: true });
    if (!command.socket && command.port === undefined) {
      // What serving on stdio first touches, made now: the streams of stdin and stdout, a decoder.
      void process.stdin;
      void process.stdout;
      new TextDecoder().decode(new Uint8Array([0x7b, 0x7d]));
    }
    log.info("blank: loaded", { control, warmed: warmed.prompts, asked: warmed.asked });
  } catch (e) {
    log.warn("blank: loading ahead failed: the first prompt loads what it needs", { error: (e as Error).message });
  }
}
