// Serving ACP: stdio or a Unix control socket.
import type { Command } from "./cli.js";
import { UsageError } from "./cli.js";

export async function serve(_command: Extract<Command, { kind: "serve" }>): Promise<void> {
  throw new UsageError("serving ACP is not built yet");
}
