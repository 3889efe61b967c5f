// The program's version, from its package.json: one folder up from the sources (daemon/), two from
// the build (dist/daemon/). No zod here: it is read on the start-up path, before anything heavy.
import { existsSync, readFileSync } from "node:fs";

const CANDIDATES = [new URL("../../package.json", import.meta.url), new URL("../package.json", import.meta.url)];

export function version(): string {
  const path = CANDIDATES.find((u) => existsSync(u)) ?? CANDIDATES[0]!;
  const pkg: unknown = JSON.parse(readFileSync(path, "utf8"));
  const v = typeof pkg === "object" && pkg !== null ? (pkg as { version?: unknown }).version : undefined;
  if (typeof v !== "string") throw new Error(`${path.pathname} has no version`);
  return v;
}
