// `lnk-link-harness usage`: what each conversation cost and what the provider's cache held, as a
// table for people or as JSON (figures from turn/usage.ts, which /status reads too).
import { existsSync } from "node:fs";
import type { AgentUsage, Fall, UsageFigures } from "../protocol/index.js";
import { agentUsage } from "../turn/usage.js";
import { UsageError, agentRef, type AgentOptions } from "./cli.js";
import { oneLine } from "./output.js";
import { namedConversation } from "./thread-arg.js";

/** A count as a person reads it: 950, 12.3k, 4.56M. */
export function human(n: number): string {
  if (n < 1_000) return String(n);
  const units = [
    [1_000, "k"],
    [1_000_000, "M"],
    [1_000_000_000, "G"],
  ] as const;
  for (const [i, [div, unit]] of units.entries()) {
    // Three figures, rounded first: 9,999 is 10.0k, and 999,999 is 1.00M, not 1000k.
    const x = Number((n / div).toPrecision(3));
    if (x < 1_000 || i === units.length - 1) return `${x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2)}${unit}`;
  }
  return String(n);
}

const percent = (share: number | null): string => (share === null ? "-" : `${(share * 100).toFixed(1)}%`);
/** A cost as reported: never rounded to nothing. */
const money = (cost: number): string => (cost >= 0.01 ? cost.toFixed(2) : cost === 0 ? "0" : cost.toPrecision(2));
const seconds = (ms: number): string => (ms < 1_000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`);

/** Columns aligned: the first to the left, the rest to the right. */
function columns(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join("  ").trimEnd();
  return [line(header), ...rows.map(line)];
}

function costCell(f: UsageFigures): string {
  if (f.cost === undefined) return "-";
  return f.turns_without_cost > 0 ? `${money(f.cost)}*` : money(f.cost);
}

function row(name: string, f: UsageFigures): string[] {
  return [name, human(f.turns), human(f.requests), human(f.tokens.in), human(f.tokens.out), human(f.tokens.cached), percent(f.cached_share), costCell(f), seconds(f.model_ms)];
}

export function causeText(fall: Fall): string {
  switch (fall.cause) {
    case "model":
      return "the model changed";
    case "section":
      return `the ${(fall.sections ?? []).join(", ")} section${(fall.sections?.length ?? 0) > 1 ? "s" : ""} changed`;
    case "window":
      return "the window dropped (its start moved)";
    case "provider":
      return "the provider didn't cache what it was sent before";
    case "unknown":
      return "unknown: kept before fingerprints were";
    default: {
      const never: never = fall.cause;
      return String(never);
    }
  }
}

/** The figures as a table and two lists. */
export function renderUsage(u: AgentUsage): string {
  const out: string[] = [];
  const rows = u.conversations.map((c) => row(c.thread, c));
  if (u.conversations.length !== 1) rows.push(row("total", u.total));
  out.push(...columns(["conversation", "turns", "requests", "in", "out", "cached", "cached share", "cost", "model time"], rows));
  const t = u.total;
  if (t.cost === undefined) out.push(t.requests > 0 ? "cost: the provider reported none (never estimated)" : "no requests");
  else if (t.turns_without_cost > 0) out.push(`* ${t.turns_without_cost} of ${t.turns} turns had a request without a reported cost: the cost is of the rest (never estimated)`);
  if (t.slowest.length > 0) {
    out.push("", "Slowest turns (time waiting on the model):");
    const many = u.conversations.length > 1;
    out.push(
      ...columns(
        [many ? "conversation" : "turn", ...(many ? ["turn"] : []), "time", "requests", "model time"],
        t.slowest.map((s) => [...(many ? [s.thread] : []), `#${s.turn}`, oneLine(s.time.slice(0, 19).replace("T", " ")), String(s.requests), seconds(s.model_ms)]),
      ).map((l) => `  ${l}`),
    );
  }
  out.push("", t.falls.length === 0 ? "The cached share fell in no turn." : "Turns whose cached share fell:");
  for (const f of t.falls) {
    out.push(`  ${u.conversations.length > 1 ? `${f.thread} ` : ""}#${f.turn} ${oneLine(f.time.slice(0, 19).replace("T", " "))}: ${percent(f.previous)} -> ${percent(f.share)}: ${causeText(f)}`);
  }
  return out.join("\n");
}

/** Prints an agent's usage, or one conversation's. */
export function printUsage(o: AgentOptions, thread: string | undefined, since: Date | undefined, json: boolean): void {
  const agent = agentRef(o);
  if (!existsSync(o.agent)) throw new UsageError(`no agent folder at ${o.agent}`);
  if (thread !== undefined) namedConversation(agent, thread);
  const warn = (line: string) => process.stderr.write(`lnk-link-harness: ${oneLine(line)}\n`);
  const u = agentUsage(agent, { ...(thread !== undefined ? { thread } : {}), ...(since ? { since } : {}), warn });
  process.stdout.write(`${json ? JSON.stringify(u, null, 2) : renderUsage(u)}\n`);
}
