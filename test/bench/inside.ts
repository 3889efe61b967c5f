// A turn's time as a client sees it, told apart: the process's own (its prompt read to its request
// written; the model's last chunk read to its response written) from the ways to and from it (the
// pipes, the loopback socket, the proxy, and waiting for a core), from stamps a pass of its own took
// in the process (stamps.ts) and the times the client and the proxy noted.
import { z } from "zod";
import { STAMP_KINDS, type Stamp } from "./stamps.js";
import { summarize, type Summary } from "./stats.js";

/** What a stamped process wrote (stamps.ts). */
export const Stamps = z.array(z.tuple([z.enum(STAMP_KINDS), z.number()]));

/** One turn as the client and the proxy saw it (ms on the machine's clock: stamps.ts machineNow). */
export interface SeenTurn {
  /** The client sent the prompt. */
  sent: number;
  /** Its request's body had reached the proxy. */
  asked: number;
  /** The model's last byte had left the proxy. */
  answered: number;
  /** The prompt's response was in the client's hands. */
  done: number;
}

/**
 * A turn's time, told apart (ms): before the model, its prompt's way to the process, the process's
 * own time, and its request's way to the proxy; after the model's last byte, that byte's way to the
 * process, the process's own time, and its response's way to the client.
 */
export interface TurnInside {
  /** The client sent the prompt, to the process reading it. */
  promptRead: number;
  /** The process's own: its prompt read, to its request written. */
  before: number;
  /** Its request written, to its body at the proxy. */
  requestTaken: number;
  /**
   * The model's last byte out of the proxy, to the process reading it: the loopback socket, and
   * whatever the process was doing meanwhile (below nothing when it read it before the proxy's
   * note that it had left).
   */
  answerRead: number;
  /** The process's own: the model's last chunk read, to its response written. */
  after: number;
  /** Its response written, to the client holding it. */
  responseTaken: number;
}

/** The first stamp of `kind` at or after `from`, if any. */
function firstAfter(stamps: readonly Stamp[], kind: Stamp[0], from: number): number | undefined {
  return stamps.find(([k, t]) => k === kind && t >= from)?.[1];
}

/**
 * Each turn told apart, from the process's stamps: its prompt read (the first input after the client
 * sent it), its request written (the first after that), its response written (the first after that:
 * a process may answer before the proxy's note that the model's last byte left it) and the model's
 * last chunk read before it. A turn whose stamps are missing or out of its bounds (a process that
 * wrote none: killed, or never stamped) is left out.
 */
export function turnsInside(turns: readonly SeenTurn[], stamps: readonly Stamp[]): TurnInside[] {
  const out: TurnInside[] = [];
  for (const turn of turns) {
    const read = firstAfter(stamps, "in", turn.sent);
    const request = read === undefined ? undefined : firstAfter(stamps, "request", read);
    const response = request === undefined ? undefined : firstAfter(stamps, "response", request);
    if (read === undefined || request === undefined || response === undefined || request > turn.asked || response > turn.done) continue;
    const lastChunk = stamps.filter(([k, t]) => k === "answer" && t >= request && t <= response).at(-1)?.[1];
    if (lastChunk === undefined) continue;
    out.push({
      promptRead: read - turn.sent,
      before: request - read,
      requestTaken: turn.asked - request,
      answerRead: lastChunk - turn.answered,
      after: response - lastChunk,
      responseTaken: turn.done - response,
    });
  }
  return out;
}

/** The turns of a stamped pass: each part's summary. */
export type InsideSplit = { [K in keyof TurnInside]: Summary };

export function summarizeInside(turns: readonly TurnInside[]): InsideSplit {
  const of = (k: keyof TurnInside) => summarize(turns.map((t) => t[k]));
  return {
    promptRead: of("promptRead"),
    before: of("before"),
    requestTaken: of("requestTaken"),
    answerRead: of("answerRead"),
    after: of("after"),
    responseTaken: of("responseTaken"),
  };
}
