// ASP over ACP: `_asp/export` gives what `state export` prints, the agent's own instructions, skills
// and memory (sessions are not given yet). DESIGN.md "ACP mapping", man lnk-link-harness-acp(7).
import { AspExportParams, describeIssues, type AspState } from "../protocol/index.js";
import type { AgentRef } from "../store/index.js";
import { exportState } from "../asp/export.js";
import type { Logger } from "./deps.js";
import { ParamsError, SessionLink, parseLink } from "./meta.js";

export const ASP_EXPORT = "_asp/export";

/** Answers `_asp/export {kinds?}`: the State of the kinds asked that it gives; each file it left is logged. */
export function aspExport(raw: unknown, agent: AgentRef, served: readonly string[], log: Logger): AspState {
  const parsed = AspExportParams.safeParse(raw ?? {});
  if (!parsed.success) throw new ParamsError(describeIssues(parsed.error));
  parseLink(SessionLink, parsed.data._meta, served);
  const { state, left } = exportState(agent, parsed.data.kinds);
  for (const l of left) log.warn("left out of the export", { path: l.path, why: l.why });
  return state;
}
