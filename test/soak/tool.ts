// The tool the soak's model calls: server-everything from npm, as a command line (each turn that calls
// it starts its own process, which a kill leaves behind), or one process over Streamable HTTP that
// outlives every daemon (faster turns, so more of them per kill); or each daemon one of the two.
import { spawn } from "node:child_process";
import { freePort } from "../fixtures/port.js";
import { EVERYTHING } from "./daemon.js";

export const TOOL_KINDS = ["stdio", "http", "both"] as const;
export type ToolKind = (typeof TOOL_KINDS)[number];

export interface Tool {
  /** LNK_TOOL_EVERYTHING's values: each daemon is given one. */
  sources: string[];
  stop(): Promise<void>;
  /** Ends it now, without waiting (the runner is exiting). */
  kill(): void;
}


const STDIO = `"${process.execPath}" "${EVERYTHING}" stdio`;

export async function startTool(kind: ToolKind): Promise<Tool> {
  if (kind === "stdio") return { sources: [STDIO], stop: async () => undefined, kill: () => undefined };
  const port = await freePort();
  const child = spawn(process.execPath, [EVERYTHING, "streamableHttp"], { env: { ...process.env, PORT: String(port) }, stdio: ["ignore", "ignore", "pipe"] });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const kill = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  };
  const stop = async () => {
    kill();
    await exited;
  };
  try {
    await new Promise<void>((resolve, reject) => {
      let err = "";
      const timer = setTimeout(() => reject(new Error(`server-everything not listening after 20 s: ${err}`)), 20_000);
      child.stderr?.setEncoding("utf8").on("data", (s: string) => {
        err += s;
        if (/listening on port/.test(err)) {
          clearTimeout(timer);
          resolve();
        }
      });
      void exited.then(() => {
        clearTimeout(timer);
        reject(new Error(`server-everything exited: ${err}`));
      });
    });
  } catch (e) {
    await stop();
    throw e;
  }
  const http = `http://127.0.0.1:${port}/mcp`;
  return { sources: kind === "both" ? [STDIO, http] : [http], stop, kill };
}
