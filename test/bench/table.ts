// The results as a plain-text table, for the terminal and the man page.
import type { BenchResults } from "./results.js";
import { againstSummary, type AgainstResult, type ClientResult } from "./client.js";
import { ms } from "./stats.js";

function columns(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join("  ");
  return [line(header), ...rows.map(line)].map((l) => `  ${l.trimEnd()}`);
}

const n = (x: number) => x.toLocaleString("en-US");

/** What paired rounds with another build's daemon (`--against`) say, in a line. */
export function againstLine(against: AgainstResult): string {
  const a = againstSummary(against);
  const n = against.rounds.length;
  return `  against ${against.other}, ${n} paired rounds of turns 2-${against.turns}: overhead ${ms(a.here)} ms here, ${ms(a.there)} ms there (medians of the rounds' medians); here less there, per round: median ${a.difference >= 0 ? "+" : ""}${ms(a.difference)} ms, lower here in ${a.lowerHere} of ${n}`;
}

/** What OpenClaw run beside the daemon (`--openclaw`) measured, in a line, or why it was not. */
export function openclawLine(o: NonNullable<ClientResult["openclaw"]>): string {
  if (!("turns" in o)) return `  OpenClaw beside: not measured: ${o.notMeasured}`;
  const t = o.turns;
  return `  OpenClaw ${o.version} beside (Node ${o.node}; its gateway, and its ACP bridge driven the same way): before the model ${ms(t.before.median)} ms, after its last byte ${ms(t.after.median)} ms, overhead ${ms(t.overhead.median)} ms (p99 ${ms(t.overhead.p99)}), medians of turns 2-${t.overhead.n + 1} of one session; its gateway took connections ${ms(o.gatewayMs)} ms after its spawn, its bridge answered initialize ${ms(o.initializeMs)} ms and session/new ${ms(o.sessionNewMs)} ms after its own`;
}

/**
 * What the stamped pass says, in lines: of each turn's time before and after the model, the way to
 * the process, the process's own time, and the way from it.
 */
export function insideLines(inside: NonNullable<ClientResult["inside"]>): string[] {
  const part = (name: string, s: NonNullable<ClientResult["inside"]>["daemon"]) =>
    `    ${name}: before the model ${ms(s.promptRead.median)} + ${ms(s.before.median)} + ${ms(s.requestTaken.median)} ms, after its last byte ${ms(s.answerRead.median)} + ${ms(s.after.median)} + ${ms(s.responseTaken.median)} ms (medians of ${s.before.n} turns)`;
  return [
    `  told apart in a pass of ${inside.processes} stamped processes of each: before the model, the prompt's way to the process + its own time to its request written + the request's way to the proxy; after the model's last byte, its way to the process (and what the process was doing meanwhile) + its own time to its response written + the response's way to the client:`,
    part("daemon      ", inside.daemon),
    part("pass-through", inside.passThrough),
  ];
}

export function renderTable(r: BenchResults): string {
  const out: string[] = [];
  const m = r.machine;
  out.push(`Link Harness bench (${r.mode}), ${r.date.slice(0, 16).replace("T", " ")} UTC`);
  out.push(`${m.cpu}, ${m.cpus} cores, ${m.memoryGb} GB, Node ${m.node} on ${m.platform}; files in ${m.tmpdir}`);
  if (m.otherWork !== null) {
    const share = Math.round(m.otherWork * 100);
    out.push(`other processes used ${share}% of the CPUs during the run${share >= 20 ? ": the machine was busy, times are high" : ""}`);
  }
  out.push("");
  out.push("1. The turn's own time: turn wall time less the time waiting on the model (ms)");
  // A run of other parts alone (--only) measured none of it: said so, not shown as a table of no rows.
  if (r.overhead.length === 0) out.push("  not measured: not asked for (--only)");
  else {
    out.push(
      ...columns(
        ["events", "window", "files", "warm med", "p99", "fresh med", "p99", "read-once med", "p99", "model med"],
        r.overhead.map((row) => [
          n(row.size),
          row.window.min === row.window.max ? n(row.window.min) : `${n(row.window.min)}-${n(row.window.max)}`,
          n(row.filesRead),
          ms(row.warm.median),
          ms(row.warm.p99),
          ms(row.fresh.median),
          ms(row.fresh.p99),
          ms(row.floor.median),
          ms(row.floor.p99),
          ms(row.model.median),
        ]),
      ),
    );
    out.push(`  ${r.overhead[0]?.warm.n ?? 0} turns of each kind a size; window: events the model was sent; files: files a fresh turn read (its window's events file, the events it holds first and last, those after it).`);
    out.push(`  Floors: read-once (the window's files read and JSON-parsed once); node -e 0 start ${ms(r.nodeStart.median)} ms (p99 ${ms(r.nodeStart.p99)}).`);
    out.push(
      r.machine.youngCollected
        ? "  Each turn and read-once began with the young generation collected, as in a new process."
        : "  Not run with --expose-gc: each turn and read-once may pay for the garbage of the one before.",
    );
  }
  out.push("");
  const p = r.prefix;
  out.push("2. Prompt-cache prefix: each request's share of bytes that starts as the previous one");
  if (p.turns === 0) out.push("  not measured: not asked for (--only)");
  else {
    out.push(
      `  ${p.turns} turns, window of ${p.windowPairs} messages and answers, ${p.drops} drops: mean ${p.mean.toFixed(3)}, between drops ${p.meanBetweenDrops.toFixed(3)}, lowest ${p.min.toFixed(3)}`,
    );
  }
  out.push("");
  out.push("3. Conversations streaming at once through one daemon (Unix socket, one ACP client)");
  if ("measured" in r.streaming) {
    const rows = r.streaming.measured;
    const first = rows[0];
    out.push(
      ...columns(
        ["conversations", "chunks", "lost", "chunks/s", "paced", "added med", "p99", "peak MB", "CPU us/chunk", "daemon CPU", "bench CPU"],
        rows.map((row) => [
          n(row.conversations),
          n(row.received),
          String(row.lost + row.garbled + row.failedTurns ? `${row.lost} (${row.garbled} out of order, ${row.failedTurns} failed)` : 0),
          n(Math.round(row.throughput)),
          n(Math.round(row.pacedThroughput)),
          ms(row.latency.median),
          ms(row.latency.p99),
          row.peakMb.toFixed(0),
          row.cpuPerChunkUs.toFixed(0),
          `${Math.round(row.daemonCpu * 100)}%`,
          `${Math.round(row.benchCpu * 100)}%`,
        ]),
      ),
    );
    if (first) {
      out.push(`  ${first.rounds} turns a conversation, each streaming ${first.chunks} chunks ${first.chunkDelayMs} ms apart; added: client receive less model server send (ms).`);
    }
    for (const row of rows) for (const f of row.failures) out.push(`  ${n(row.conversations)}: ${f}`);
  } else out.push(`  not measured: ${r.streaming.notMeasured}`);
  out.push("");
  out.push("4. Cold start and idle memory (stdio)");
  if ("measured" in r.start) {
    const s = r.start.measured;
    out.push(`  first initialize answer: median ${ms(s.coldStart.median)} ms, p99 ${ms(s.coldStart.p99)} ms over ${s.coldStart.n} starts; node -e 0: ${ms(r.nodeStart.median)} ms`);
    out.push(`  RSS: ${s.rssAfterInitializeMb.toFixed(0)} MB after initialize, ${s.rssAfterTurnMb.toFixed(0)} MB after one turn (peak ${s.peakMb.toFixed(0)} MB)`);
  } else out.push(`  not measured: ${r.start.notMeasured}`);
  out.push("");
  out.push("5. usage over a long conversation (the command run whole, and its count in one process)");
  if (r.usage && "measured" in r.usage) {
    const u = r.usage.measured;
    out.push(`  ${n(u.events)} events, ${n(u.answers)} answers: the command ${ms(u.command.median)} ms median (p99 ${ms(u.command.p99)}) over ${u.command.n} runs, counting from the first event; counting alone ${ms(u.inProcess.median)} ms (p99 ${ms(u.inProcess.p99)}); node -e 0 ${ms(u.nodeStart)} ms`);
    if (u.commandKept) out.push(`  going on from what the count before kept (usage.json), nothing written since: ${ms(u.commandKept.median)} ms median (p99 ${ms(u.commandKept.p99)})`);
  } else out.push(`  not measured: ${r.usage?.notMeasured ?? "not in this run"}`);
  out.push("");
  out.push("6. The turn as a client sees it (ACP SDK client on stdio, a timing proxy before the model)");
  if (r.client && "measured" in r.client) {
    const c = r.client.measured;
    const split = (name: string, t: { before: { median: number }; after: { median: number }; overhead: { median: number; p99: number }; cpu?: number }) =>
      `  ${name}: before the model ${ms(t.before.median)} ms, after its last byte ${ms(t.after.median)} ms, overhead ${ms(t.overhead.median)} ms (p99 ${ms(t.overhead.p99)}), medians of turns 2-${c.turns}${c.rounds?.length ? ` of ${c.rounds.length} processes` : ""}${t.cpu !== undefined ? `; the process's CPU ${ms(t.cpu)} ms a turn` : ""}`;
    out.push(split("daemon      ", c.daemon));
    out.push(split("pass-through", c.passThrough));
    out.push(`  durable write (write, fsync, link, fsync the folder): ${ms(c.durableWrite.median)} ms`);
    if (c.daemon.client && c.passThrough.client) {
      out.push(
        `  of the time after the model's last byte, the client's own (its last read to the response in its hands): daemon ${ms(c.daemon.client.median)} ms, pass-through ${ms(c.passThrough.client.median)} ms`,
      );
    }
    if (c.inside) out.push(...insideLines(c.inside));
    if (c.rounds?.length) {
      out.push(
        `  by round (daemon / durable write + pass-through, medians): ${c.rounds.map((r) => `${ms(r.daemon)} / ${ms(r.durableWrite)} + ${ms(r.passThrough)} = ${r.ratio.toFixed(2)}x`).join("; ")}`,
      );
    }
    out.push(
      `  spawn to: initialize ${ms(c.spawn.initialize.median)} ms, session/new ${ms(c.spawn.sessionNew.median)} ms, first turn answered ${ms(c.spawn.firstTurn.median)} ms (its overhead ${ms(c.firstTurnOverhead.median)} ms); node -e 0: ${ms(c.nodeStart.median)} ms`,
    );
    if (c.ageing) {
      const a = c.ageing;
      const spans = a.spans.map((s) => `turns ${s.from}-${s.to} ${ms(s.daemon.median)} / ${ms(c.durableWrite.median)} + ${ms(s.passThrough.median)} = ${s.ratio.toFixed(2)}x`);
      out.push(`  by the turns' age (${a.processes} processes of each, ${n(a.turns)} turns each; daemon / durable write + pass-through, medians): ${spans.join("; ")}`);
    }
    if (c.takeover) {
      const t = c.takeover;
      out.push(
        `  a new process's first turn of a conversation of ${n(t.events)} events (session/resume, then the prompt; the ~2,000-event window): with its window's events file, spawn to answered ${ms(t.spawnWith.median)} ms, the turn's overhead ${ms(t.withFile.median)} ms; without it (read a file an event), ${ms(t.spawnWithout.median)} and ${ms(t.without.median)} ms (medians of ${t.withFile.n} each, alternating)`,
      );
    }
    if (c.against) out.push(againstLine(c.against));
    if (c.openclaw) out.push(openclawLine(c.openclaw));
  } else out.push(`  not measured: ${r.client ? ("notMeasured" in r.client ? r.client.notMeasured : "") : "not asked for"}`);
  if (r.dense) {
    out.push("");
    out.push("7. Dense deployment (--blank and --agents, stdio)");
    if ("measured" in r.dense) {
      const d = r.dense.measured;
      out.push(`  Bind to the first answered prompt: median ${ms(d.bindToAnswer.median)} ms (p99 ${ms(d.bindToAnswer.p99)}) over ${d.bindToAnswer.n} binds; less the model's own time: ${ms(d.bindOverModel.median)} ms`);
      for (const row of d.rss) out.push(`  ${row.agents} agents, each after one turn: RSS ${row.rssMb.toFixed(0)} MB (peak ${row.peakMb.toFixed(0)} MB)`);
    } else out.push(`  not measured: ${r.dense.notMeasured}`);
  }
  out.push("");
  out.push("Targets");
  for (const t of r.targets) out.push(`  ${t.pass === undefined ? "----" : t.pass ? "PASS" : "FAIL"}  ${t.name}: ${t.measured}`);
  out.push("");
  out.push(`${(r.elapsedMs / 1000).toFixed(0)} s in all.`);
  return out.join("\n");
}
