// One connection's session/updates, sent in the order they were made.
import * as acp from "@agentclientprotocol/sdk";
import type { AgentContext, SessionUpdate } from "@agentclientprotocol/sdk";
import type { Subscriber } from "./turns.js";

/** One connection's updates, sent in the order they were made; a connection that went away is skipped. */
export class Outbox {
  private chain: Promise<void> = Promise.resolve();
  private gone = false;
  private readonly subscribers = new Map<string, Subscriber>();

  send(client: AgentContext, sessionId: string, update: SessionUpdate): void {
    if (this.gone) return;
    this.chain = this.chain
      .then(() => client.notify(acp.methods.client.session.update, { sessionId, update }))
      .catch(() => {
        this.gone = true;
      });
  }

  /** This connection's view of a session, the same object each time so a turn sends it each update once. */
  subscriber(client: AgentContext, sessionId: string): Subscriber {
    let sub = this.subscribers.get(sessionId);
    if (!sub) {
      sub = { send: (update) => this.send(client, sessionId, update) };
      this.subscribers.set(sessionId, sub);
    }
    return sub;
  }

  flushed(): Promise<void> {
    return this.chain;
  }

  close(): void {
    this.gone = true;
  }
}
