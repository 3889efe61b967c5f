// Link's extension methods: `_link/prove` (the proof, both ways) and `_link/recover` (answers a turn
// finished but never delivered), and what a connection keeps for them (DESIGN.md "ACP mapping",
// man: lnk-link-harness-acp(7) "The proof" and "Recovery").
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import * as acp from "@agentclientprotocol/sdk";
import { z } from "zod";
import { ProveParams, RecoverParams, type ProveResult, type RecoverResult } from "../protocol/index.js";
import type { AgentRef } from "../store/index.js";
import { recover } from "./delivery.js";
import type { Logger } from "./deps.js";
import { invalidParams } from "./errors.js";
import { ParamsError, SessionLink, parseLink } from "./meta.js";

export const LINK_METHODS = {
  prove: "_link/prove",
  recover: "_link/recover",
  /** Stands in for a request a port endpoint refuses until its connection has proved itself (daemon/gate.ts). */
  unproved: "_link/unproved",
} as const;

/**
 * What a client HMACs to prove itself: this prefix, then the nonce it was given. No challenge may
 * begin with it, so this process (or any other holding the key) never answers one for a client.
 */
export const CLIENT_PROOF_PREFIX = "lnk-link-harness client proof ";

/**
 * How many challenges (and nonces given) a process remembers to refuse their replay: a bound on its
 * memory (about 12 MB when full). Past it the oldest is forgotten, so a client that sends challenge
 * after challenge never leaves the process unable to prove itself to Link.
 */
export const REMEMBERED_MAX = 200_000;

/**
 * Each challenge answered and each nonce given by this process, as a short digest, oldest first:
 * none is answered twice while remembered.
 */
const seen = new Set<string>();

/** 128 bits of the SHA-256, as a string of 16 one-byte characters (a copy, holding nothing larger). */
const digest = (s: string) => createHash("sha256").update(s, "utf8").digest().toString("latin1", 0, 16);

/** Remembers a digest, forgetting the oldest while the process remembers its most. */
function remember(d: string): void {
  for (const oldest of seen) {
    if (seen.size < REMEMBERED_MAX) break;
    seen.delete(oldest);
  }
  seen.add(d);
}

/** How many challenges and nonces the process remembers now (for tests). */
export function remembered(): number {
  return seen.size;
}

/** Hex HMAC-SHA256 of the text's UTF-8 bytes with the key. */
export function hmacHex(key: string, text: string): string {
  return createHmac("sha256", key).update(text, "utf8").digest("hex");
}

type Id = string | number;

/**
 * A port endpoint's connection as its endpoint sees it: whether it proved itself yet (or needs not:
 * no key), for the bounds it is held to until then (daemon/serve.ts).
 */
export interface Gate {
  proved: boolean;
}

/** What one connection keeps for Link's methods: whether it proved itself, its nonce, the answers it wrote. */
export class LinkConnection {
  private provedNow: boolean;
  /** The nonce this connection was last given to answer, once. */
  nonce: string | undefined;
  /** Who waits for the answer to each id, in the order they asked: a client may use one id twice. */
  private readonly waiting = new Map<Id, ((written: boolean) => void)[]>();
  private closed = false;

  constructor(
    readonly gated: boolean,
    /** Its endpoint's view of it, told once it has proved itself. */
    private readonly gate?: Gate,
  ) {
    this.provedNow = !gated;
    if (gate && !gated) gate.proved = true;
  }

  /** Whether the connection proved itself (always, where no proof is asked). */
  get proved(): boolean {
    return this.provedNow;
  }

  set proved(now: boolean) {
    this.provedNow = now;
    if (now && this.gate) this.gate.proved = true;
  }

  /** Whether the answer to the request `id` was written to the client: true once it is, false once the connection ended first. */
  written(id: Id | null): Promise<boolean> {
    if (id === null || this.closed) return Promise.resolve(false);
    return new Promise((resolve) => {
      const waiters = this.waiting.get(id);
      if (waiters) waiters.push(resolve);
      else this.waiting.set(id, [resolve]);
    });
  }

  /** The transport wrote an answer to `id`: the one who asked first for it is told. */
  responded(id: Id): void {
    const waiters = this.waiting.get(id);
    const done = waiters?.shift();
    if (waiters?.length === 0) this.waiting.delete(id);
    done?.(true);
  }

  /** The connection ended: an answer not written by now never will be. */
  close(): void {
    this.closed = true;
    for (const waiters of this.waiting.values()) for (const done of waiters) done(false);
    this.waiting.clear();
  }
}

/** The error of a proof that can't be made: no key. */
function noKey(): acp.RequestError {
  return acp.RequestError.invalidRequest(undefined, "no key to prove with: this process was given none (LNK_KEY is not set, and no Bind gave one)");
}

/**
 * `_link/prove`: the answer to the client's nonce is checked first (constant-time), then the
 * challenge is answered, then a fresh nonce given while the connection has not proved itself.
 */
export function prove(key: string | undefined, conn: LinkConnection, raw: unknown): ProveResult {
  const parsed = ProveParams.safeParse(raw ?? {});
  if (!parsed.success) throw invalidParams(parsed.error.issues.map((i) => `${i.path.map(String).join(".") || "(params)"}: ${i.message}`).join("; "));
  if (key === undefined || key === "") throw noKey();
  const { challenge, answer } = parsed.data;
  if (answer !== undefined) {
    const nonce = conn.nonce;
    // A nonce is answered once, rightly or not.
    conn.nonce = undefined;
    if (nonce === undefined) throw invalidParams("answer: this connection holds no nonce to answer: ask _link/prove with a challenge first");
    const expected = createHmac("sha256", key).update(`${CLIENT_PROOF_PREFIX}${nonce}`, "utf8").digest();
    const given = Buffer.from(answer, "hex");
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      throw acp.RequestError.authRequired(undefined, "the answer does not match this connection's nonce: the connection has not proved itself");
    }
    conn.proved = true;
  }
  const result: ProveResult = { proved: conn.proved };
  if (challenge !== undefined) {
    if (challenge.startsWith(CLIENT_PROOF_PREFIX)) throw invalidParams(`challenge: may not begin with ${JSON.stringify(CLIENT_PROOF_PREFIX)}, which a client's own proof begins with`);
    const d = digest(challenge);
    if (seen.has(d)) throw invalidParams("challenge: answered already by this process: a challenge is answered once, never replayed");
    remember(d);
    result.hmac = hmacHex(key, challenge);
  }
  if (!conn.proved) {
    const nonce = randomBytes(32).toString("hex");
    remember(digest(nonce));
    conn.nonce = nonce;
    result.nonce = nonce;
  }
  return result;
}

/** The error a request is answered with on a port endpoint before its connection proved itself. */
export function unproved(method: unknown): acp.RequestError {
  const name = typeof method === "string" ? method.slice(0, 80) : "this method";
  return acp.RequestError.authRequired({ method: name }, `${name} is served once this connection has proved itself with ${LINK_METHODS.prove} (see lnk-link-harness-acp(7))`);
}

/** What Link's methods need of the agent a connection serves. */
export interface LinkAgent {
  key: string | undefined;
  agent: AgentRef;
  /** The names a request may give the agent in `_meta.link.agent`. */
  served: string | readonly string[];
  log: Logger;
}

/** Refuses -32602 a request whose `_meta.link` can't be read or names an agent this connection doesn't serve, as every method does. */
function forThisAgent(params: unknown, served: string | readonly string[]): void {
  const meta = params !== null && typeof params === "object" ? (params as { _meta?: unknown })._meta : undefined;
  try {
    parseLink(SessionLink, meta !== null && typeof meta === "object" ? (meta as Record<string, unknown>) : undefined, served);
  } catch (e) {
    if (e instanceof ParamsError) throw invalidParams(e.message);
    throw e;
  }
}

/** Registers Link's methods on a connection's app: the proof, the recovery, and the stand-in refused until the proof is made. */
export function withLinkMethods(app: acp.AgentApp, a: LinkAgent, conn: LinkConnection): acp.AgentApp {
  return app
    .onRequest(LINK_METHODS.prove, z.unknown(), ({ params }) => {
      forThisAgent(params, a.served);
      return prove(a.key, conn, params);
    })
    .onRequest(LINK_METHODS.recover, z.unknown(), ({ params, requestId }) => {
      forThisAgent(params, a.served);
      const parsed = RecoverParams.safeParse(params ?? {});
      if (!parsed.success) throw invalidParams("_link/recover takes an object, {}");
      const { answers, more } = recover(a.agent, conn.written(requestId), a.log);
      return { answers, ...(more ? { more: true as const } : {}) } satisfies RecoverResult;
    })
    .onRequest(LINK_METHODS.unproved, z.object({ method: z.unknown() }).loose(), ({ params }) => {
      throw unproved(params.method);
    });
}
