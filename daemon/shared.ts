// --agents FILE: one process for several agents of one owner (spec: contract.txt "shared").
import type { Process } from "./serve.js";
import { UsageError } from "./cli.js";

export function serveShared(_p: Process, _file: string): Promise<void> {
  return Promise.reject(new UsageError("--agents is not supported yet: run one process per agent"));
}
