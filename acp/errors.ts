// Errors sent to a peer: -32602 bad params, -32002 unknown session, -32603 anything else, in words a
// person can act on and never with a stack.
import { RequestError } from "@agentclientprotocol/sdk";
import { StoreError } from "../protocol/index.js";
import { InvalidNameError } from "../store/index.js";
import { ContentError } from "./content.js";
import type { Logger } from "./deps.js";
import { ParamsError } from "./meta.js";
import { SessionNotFound } from "./sessions.js";
import { StoppingError, TurnFailed } from "./turns.js";

export const INVALID_PARAMS = -32602;
export const SESSION_NOT_FOUND = -32002;
export const INTERNAL_ERROR = -32603;
export const METHOD_NOT_FOUND = -32601;

export function invalidParams(message: string): RequestError {
  return new RequestError(INVALID_PARAMS, `Invalid params: ${message}`);
}

export function sessionNotFound(sessionId: string): RequestError {
  return new RequestError(SESSION_NOT_FOUND, `Resource not found: no session ${JSON.stringify(sessionId.slice(0, 80))}`, { sessionId });
}

function isZodError(e: unknown): e is { issues: { path: PropertyKey[]; message: string }[] } {
  return typeof e === "object" && e !== null && (e as { name?: unknown }).name === "ZodError" && Array.isArray((e as { issues?: unknown }).issues);
}

/** The JSON-RPC error a handler's failure is answered with. */
export function toRequestError(e: unknown, method: string, log: Logger): RequestError {
  if (e instanceof RequestError) return e;
  if (e instanceof SessionNotFound) return sessionNotFound(e.sessionId);
  if (e instanceof ParamsError || e instanceof ContentError || e instanceof InvalidNameError) return invalidParams(e.message);
  if (isZodError(e)) {
    return invalidParams(e.issues.map((i) => `${i.path.map(String).join(".") || "(top)"}: ${i.message}`).join("; "));
  }
  if (e instanceof TurnFailed) {
    return new RequestError(INTERNAL_ERROR, `Internal error: ${e.message}`, {
      ...(e.outcome?.failure ? { reason: e.outcome.failure.reason } : {}),
    });
  }
  if (e instanceof StoppingError) return new RequestError(INTERNAL_ERROR, `Internal error: ${e.message}`);
  const message = e instanceof Error ? e.message : String(e);
  log.error("request failed", { method, error: message, ...(e instanceof StoreError ? { path: e.path } : {}) });
  return new RequestError(INTERNAL_ERROR, `Internal error: ${message}`);
}
