// The program's version, from its package.json (dist/daemon/ is two folders below it).
import { readFileSync } from "node:fs";
import { z } from "zod";

export function version(): string {
  const pkg = z.object({ version: z.string() }).loose();
  return pkg.parse(JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"))).version;
}
