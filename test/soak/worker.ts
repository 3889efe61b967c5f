// One conversation's client: connects to whichever daemon serves, resumes its session and prompts,
// one prompt at a time, until its daemon is killed; then waits for the next. On the last daemon it
// takes one more turn, which must be acknowledged.
import * as acp from "@agentclientprotocol/sdk";
import type { SessionNotification } from "@agentclientprotocol/sdk";
import { openClient, socketStream } from "../acp-client.js";
import type { Supervisor } from "./daemon.js";
import { promptText } from "./model.js";
import type { Bus } from "./triggers.js";

export interface Ack {
  thread: string;
  k: number;
  stopReason: string;
  /** When the client had the response (performance.now()). */
  at: number;
}

/** What the clients did and were told: the checks hold the disk to it. */
export class ClientLog {
  /** Every prompt sent, by conversation: its number. */
  readonly sent = new Map<string, number[]>();
  /** Prompts answered with a stop reason. */
  readonly acks: Ack[] = [];
  /** Requests the daemon answered with a JSON-RPC error. */
  readonly errors: string[] = [];
  /** What went wrong on the clients' side that must not. */
  readonly violations: string[] = [];
}

function rpcError(e: unknown): { code: number; message: string } | undefined {
  if (typeof e !== "object" || e === null) return undefined;
  const { code, message } = e as { code?: unknown; message?: unknown };
  return typeof code === "number" ? { code, message: String(message) } : undefined;
}

export class Worker {
  private k = 0;
  private created = false;

  constructor(
    readonly thread: string,
    private readonly socket: string,
    private readonly cwd: string,
    private readonly sup: Supervisor,
    private readonly bus: Bus,
    private readonly record: ClientLog,
  ) {
    record.sent.set(thread, []);
  }

  private onUpdate = (n: SessionNotification): void => {
    const u = n.update;
    if (u.sessionUpdate === "tool_call") this.bus.emit("call");
    else if (u.sessionUpdate === "tool_call_update" && (u.status === "completed" || u.status === "failed")) this.bus.emit("answer");
  };

  async run(): Promise<void> {
    let seen = 0;
    for (;;) {
      const gen = await this.sup.next(seen);
      if (!gen) return;
      seen = gen.id;
      try {
        await this.serve(gen.final);
        if (gen.final) return;
      } catch (e) {
        const err = rpcError(e);
        if (gen.final) {
          this.record.violations.push(`${this.thread}: the last turn, on a daemon not killed, failed: ${err ? `${err.code} ${err.message}` : String(e)}`);
          return;
        }
        // A kill closes the connection; an error the daemon answered means it could not take the turn.
        if (err) this.record.errors.push(`${this.thread} #${this.k}: ${err.code} ${err.message}`);
      }
      await gen.exited;
    }
  }

  /** One connection: prompts until it breaks (or, on the last daemon, once). */
  private async serve(final: boolean): Promise<void> {
    const { stream, socket } = await socketStream(this.socket);
    try {
      const client = await openClient(stream, this.onUpdate);
      const session = { cwd: this.cwd, mcpServers: [] };
      if (this.created) await client.agent.request(acp.methods.agent.session.resume, { sessionId: this.thread, ...session });
      else {
        const made = await client.agent.request(acp.methods.agent.session.new, { ...session, _meta: { link: { thread: this.thread } } });
        if (made.sessionId !== this.thread) this.record.violations.push(`${this.thread}: session/new named the session ${made.sessionId}`);
        this.created = true;
      }
      do {
        const k = ++this.k;
        this.record.sent.get(this.thread)?.push(k);
        const answer = await client.agent.request(acp.methods.agent.session.prompt, {
          sessionId: this.thread,
          prompt: [{ type: "text", text: promptText(this.thread, k) }],
        });
        this.record.acks.push({ thread: this.thread, k, stopReason: answer.stopReason, at: performance.now() });
        this.bus.emit("ack");
      } while (!final);
    } finally {
      socket.destroy();
    }
  }
}
