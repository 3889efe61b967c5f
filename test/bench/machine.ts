// How busy the machine was with other work while the bench ran: every figure is a time on a shared
// machine, so a run that other processes slowed down says so.
import { readFileSync } from "node:fs";

interface CpuSample {
  /** Clock ticks all CPUs spent busy, and in all. */
  busy: number;
  total: number;
  /** Ticks this process and its children that have ended spent. */
  own: number;
}

function sample(): CpuSample | undefined {
  try {
    const cpu = readFileSync("/proc/stat", "utf8").split("\n")[0]?.trim().split(/\s+/).slice(1).map(Number) ?? [];
    const total = cpu.slice(0, 8).reduce((s, x) => s + x, 0);
    const idle = (cpu[3] ?? 0) + (cpu[4] ?? 0);
    const stat = readFileSync("/proc/self/stat", "utf8");
    // utime, stime, cutime, cstime: fields 14 to 17, after the command name in parentheses.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ").slice(11, 15).map(Number);
    return { busy: total - idle, total, own: fields.reduce((s, x) => s + x, 0) };
  } catch {
    return undefined;
  }
}

/** Starts watching; the function it returns gives the share of all CPUs that other processes used meanwhile. */
export function watchOtherWork(): () => number | undefined {
  const before = sample();
  return () => {
    const after = sample();
    if (!before || !after || after.total <= before.total) return undefined;
    const others = after.busy - before.busy - (after.own - before.own);
    return Math.max(0, others) / (after.total - before.total);
  };
}
