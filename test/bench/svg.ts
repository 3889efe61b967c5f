// The results as a small SVG chart, drawn by hand: the turn's own time by conversation length, the
// streaming latency by concurrency, and the targets.
import type { BenchResults } from "./results.js";
import { ms, summarize } from "./stats.js";

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const COLORS = { warm: "#2f6db3", fresh: "#e08a1e", floor: "#8a8a8a", p99: "#222", pass: "#1d7a35", fail: "#b3261e", none: "#777" };

function text(x: number, y: number, s: string, attrs = ""): string {
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" ${attrs}>${esc(s)}</text>`;
}

function rect(x: number, y: number, w: number, h: number, fill: string): string {
  return `<rect x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${w.toFixed(1)}" height="${Math.max(0, h).toFixed(1)}" fill="${fill}"/>`;
}

function line(x1: number, y1: number, x2: number, y2: number, stroke: string, extra = ""): string {
  return `<line x1="${x1.toFixed(1)}" y1="${y1.toFixed(1)}" x2="${x2.toFixed(1)}" y2="${y2.toFixed(1)}" stroke="${stroke}" ${extra}/>`;
}

/** Lines of at most `width` characters, broken at spaces. */
function wrap(s: string, width: number): string[] {
  const lines: string[] = [];
  let current = "";
  for (const word of s.split(" ")) {
    if (current && current.length + 1 + word.length > width) {
      lines.push(current);
      current = word;
    } else current = current ? `${current} ${word}` : word;
  }
  if (current) lines.push(current);
  return lines;
}

/** A round top for a linear axis. */
function niceMax(v: number): number {
  const p = 10 ** Math.floor(Math.log10(Math.max(v, 1e-9)));
  for (const k of [1, 2, 2.5, 5, 10]) if (k * p >= v) return k * p;
  return 10 * p;
}

function overheadPanel(r: BenchResults, x0: number, y0: number, w: number, h: number): string[] {
  const out: string[] = [text(x0, y0 - 18, "1. The turn's own time (ms): median bars, p99 ticks", 'font-weight="bold"')];
  const series = [
    { key: "warm", label: "warm", color: COLORS.warm },
    { key: "fresh", label: "fresh", color: COLORS.fresh },
    { key: "floor", label: "read-once floor", color: COLORS.floor },
  ] as const;
  // Scaled to the medians: a p99 far above them is marked at the top with its value.
  const top = niceMax(1.5 * Math.max(5, ...r.overhead.flatMap((row) => series.map((s) => row[s.key].median))));
  const y = (v: number) => y0 + h - (Math.min(v, top) / top) * h;
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    out.push(line(x0, y(v), x0 + w, y(v), "#ddd"), text(x0 - 6, y(v) + 4, String(Number(v.toPrecision(3))), 'text-anchor="end"'));
  }
  out.push(line(x0, y(5), x0 + w, y(5), COLORS.fail, 'stroke-dasharray="4 3"'), text(x0 + w + 4, y(5) + 3, "5 ms", `font-size="9" fill="${COLORS.fail}"`));
  const group = w / Math.max(1, r.overhead.length);
  const bar = Math.min(34, (group - 24) / series.length);
  r.overhead.forEach((row, g) => {
    const gx = x0 + g * group + (group - bar * series.length) / 2;
    series.forEach((s, i) => {
      const bx = gx + i * bar;
      const v = row[s.key];
      out.push(rect(bx + 2, y(v.median), bar - 4, y0 + h - y(v.median), s.color));
      out.push(line(bx + 4, y(v.p99), bx + bar - 4, y(v.p99), COLORS.p99, 'stroke-width="2"'));
      if (v.p99 > top) out.push(text(bx + bar / 2, y(top) - 3, `p99 ${ms(v.p99)}`, 'text-anchor="middle" font-size="8"'));
      out.push(text(bx + bar / 2, y(v.median) - 3, ms(v.median), 'text-anchor="middle" font-size="9"'));
    });
    out.push(text(x0 + g * group + group / 2, y0 + h + 14, `${row.size.toLocaleString("en-US")} events`, 'text-anchor="middle"'));
    out.push(text(x0 + g * group + group / 2, y0 + h + 26, `window ${row.window.max.toLocaleString("en-US")}`, 'text-anchor="middle" font-size="9" fill="#555"'));
  });
  series.forEach((s, i) => out.push(rect(x0 + i * 120, y0 + h + 36, 10, 10, s.color), text(x0 + i * 120 + 14, y0 + h + 45, s.label)));
  return out;
}

function streamingPanel(r: BenchResults, x0: number, y0: number, w: number, h: number): string[] {
  const out: string[] = [text(x0, y0 - 18, "3. Added latency per chunk (ms, log): median, p99", 'font-weight="bold"')];
  if (!("measured" in r.streaming)) return [...out, text(x0, y0 + 20, `not measured: ${r.streaming.notMeasured}`.slice(0, 70))];
  const rows = r.streaming.measured;
  const top = 10 ** Math.ceil(Math.log10(Math.max(10, ...rows.map((row) => row.latency.p99))));
  const bottom = 0.1;
  const y = (v: number) => y0 + h - ((Math.log10(Math.max(v, bottom)) - Math.log10(bottom)) / (Math.log10(top) - Math.log10(bottom))) * h;
  for (let v = bottom; v <= top; v *= 10) out.push(line(x0, y(v), x0 + w, y(v), "#ddd"), text(x0 - 6, y(v) + 4, String(Number(v.toPrecision(1))), 'text-anchor="end"'));
  const group = w / Math.max(1, rows.length);
  const bar = Math.min(30, group / 3);
  rows.forEach((row, g) => {
    const gx = x0 + g * group + group / 2;
    const bad = row.lost + row.garbled + row.failedTurns > 0;
    out.push(rect(gx - bar / 2, y(row.latency.median), bar, y0 + h - y(row.latency.median), bad ? COLORS.fail : COLORS.warm));
    out.push(line(gx - bar / 2, y(row.latency.p99), gx + bar / 2, y(row.latency.p99), COLORS.p99, 'stroke-width="2"'));
    out.push(text(gx, y(row.latency.median) - 3, ms(row.latency.median), 'text-anchor="middle" font-size="9"'));
    out.push(text(gx, y0 + h + 14, `${row.conversations} at once`, 'text-anchor="middle"'));
    out.push(text(gx, y0 + h + 26, `${Math.round(row.throughput).toLocaleString("en-US")}/s, ${row.peakMb.toFixed(0)} MB`, 'text-anchor="middle" font-size="9" fill="#555"'));
  });
  return out;
}

export function renderSvg(r: BenchResults): string {
  const width = 900;
  const body: string[] = [];
  body.push(text(20, 24, `Link Harness bench (${r.mode}) ${r.date.slice(0, 10)}`, 'font-size="15" font-weight="bold"'));
  const others = r.machine.otherWork === null ? "" : `; other processes used ${Math.round(r.machine.otherWork * 100)}% of the CPUs meanwhile`;
  body.push(text(20, 40, `${r.machine.cpu}, ${r.machine.cpus} cores, Node ${r.machine.node}${others}`, 'fill="#555"'));
  body.push(...overheadPanel(r, 60, 80, 440, 200));
  body.push(...streamingPanel(r, 580, 80, 290, 200));
  let y = 360;
  const p = r.prefix;
  body.push(text(20, y, `2. Prompt-cache prefix share: ${p.mean.toFixed(3)} over ${p.turns} turns with ${p.drops} drops (window of ${p.windowPairs} messages and answers)`));
  y += 18;
  if ("measured" in r.start) {
    const s = r.start.measured;
    body.push(
      text(20, y, `4. Cold start to initialize: ${ms(s.coldStart.median)} ms (node -e 0: ${ms(r.nodeStart.median)} ms); RSS ${s.rssAfterInitializeMb.toFixed(0)} MB idle, ${s.rssAfterTurnMb.toFixed(0)} MB after a turn`),
    );
  } else body.push(text(20, y, `4. Cold start: not measured: ${r.start.notMeasured}`.slice(0, 130)));
  if (r.client && "measured" in r.client) {
    const c = r.client.measured;
    const floor = c.durableWrite.median + c.passThrough.overhead.median;
    y += 18;
    body.push(
      text(20, y, `6. As a client sees it: overhead ${ms(c.daemon.overhead.median)} ms (before the model ${ms(c.daemon.before.median)}, after ${ms(c.daemon.after.median)}), floor ${ms(floor)} ms (durable write ${ms(c.durableWrite.median)}, pass-through ${ms(c.passThrough.overhead.median)})${c.rounds?.length ? `; rounds' median ${summarize(c.rounds.map((r) => r.ratio)).median.toFixed(2)}x` : ""}`),
    );
    y += 18;
    body.push(
      text(20, y, `   spawn to: initialize ${ms(c.spawn.initialize.median)}, session/new ${ms(c.spawn.sessionNew.median)}, first answer ${ms(c.spawn.firstTurn.median)} ms; node -e 0 ${ms(c.nodeStart.median)} ms`),
    );
  }
  if (r.dense && "measured" in r.dense) {
    const d = r.dense.measured;
    y += 18;
    body.push(
      text(20, y, `7. Bind to the first answer ${ms(d.bindToAnswer.median)} ms (${ms(d.bindOverModel.median)} over the model's time); RSS ${d.rss.map((x) => `${x.rssMb.toFixed(0)} MB at ${x.agents}`).join(", ")} agents`),
    );
  }
  y += 28;
  body.push(text(20, y, "Targets", 'font-weight="bold"'));
  for (const t of r.targets) {
    y += 17;
    const [label, color] = t.pass === undefined ? ["----", COLORS.none] : t.pass ? ["PASS", COLORS.pass] : ["FAIL", COLORS.fail];
    body.push(text(20, y, label, `font-weight="bold" fill="${color}"`));
    wrap(`${t.name}: ${t.measured}`, 135).forEach((part, i) => {
      if (i > 0) y += 14;
      body.push(text(62, y, part));
    });
  }
  const height = y + 20;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    ...body,
    "</svg>",
    "",
  ].join("\n");
}
