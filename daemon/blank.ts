// --blank CONTROL: a process started ahead, holding nothing of anyone's (spec: contract.txt "blank").
import type { Command } from "./cli.js";
import type { Process } from "./serve.js";
import { UsageError } from "./cli.js";

export function serveBlank(_p: Process, _command: Extract<Command, { kind: "serve" }>): Promise<void> {
  return Promise.reject(new UsageError("--blank is not supported yet: name the agent with --agent"));
}
