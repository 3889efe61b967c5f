#!/usr/bin/env node
// lnk-link-harness: the process. Loads only what the command needs, when it needs it.
import { USAGE, UsageError, parseCommandLine, type Command } from "./cli.js";
import { oneLine } from "./output.js";
import { version } from "./version.js";

/** Prints one line on stderr and exits non-zero: bad input never writes anything. */
function fail(message: string, code: number): never {
  // One line, which nothing read from a folder (a key, a name) can make act on the terminal.
  process.stderr.write(`lnk-link-harness: ${oneLine(message.replace(/\s*\n\s*/g, " "))}\n`);
  process.exit(code);
}

async function run(command: Command): Promise<void> {
  switch (command.kind) {
    case "help":
      process.stdout.write(`${USAGE}\n`);
      return;
    case "version":
      process.stdout.write(`lnk-link-harness ${version()}\n`);
      return;
    case "contract": {
      const { contract } = await import("./contract.js");
      process.stdout.write(`${JSON.stringify(contract(), null, 2)}\n`);
      return;
    }
    case "configure":
      await (await import("./commands.js")).configure(command.agent, command.file);
      return;
    case "state":
      await (await import("./commands.js")).printState(command.agent, command.export);
      return;
    case "state import":
      await (await import("./state-import.js")).importState(command.agent, command.from ? { from: command.from.harness, dir: command.from.dir } : { file: command.file });
      return;
    case "facts":
      process.stdout.write(await (await import("./facts.js")).factsReport(command.agent, command.model));
      return;
    case "instructions":
      process.stdout.write((await import("./instructions.js")).instructionsReport(command.agent, command.thread));
      return;
    case "conversation":
      await (await import("./conversation.js")).printConversation(command.agent, command.thread, command.json);
      return;
    case "conversations move out":
      await (await import("./conversations-move.js")).moveOut(command.agent, command.threads);
      return;
    case "conversations move in":
      await (await import("./conversations-move.js")).moveIn(command.agent, command.file);
      return;
    case "usage":
      (await import("./usage.js")).printUsage(command.agent, command.thread, command.since, command.json);
      return;
    case "serve": {
      const { serve } = await import("./serve.js");
      await serve(command);
      return;
    }
    default: {
      const never: never = command;
      throw new Error(`unhandled command ${String(never)}`);
    }
  }
}

let command: Command;
try {
  command = parseCommandLine(process.argv.slice(2));
} catch (e) {
  if (e instanceof UsageError) fail(e.message, 2);
  throw e;
}
run(command).catch((e: unknown) => {
  // Told by its exit code, not its class: this file is bundled apart from the modules it loads
  // later, which have their own copy of UsageError.
  if (e instanceof Error && "exitCode" in e && typeof e.exitCode === "number" && e.exitCode > 0) fail(e.message, e.exitCode);
  // One line, as for bad input: the message alone says what failed.
  fail(e instanceof Error ? e.message : String(e), 1);
});
