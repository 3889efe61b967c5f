// ASP over ACP: `_asp/export` gives what `state export` prints, the agent's own instructions, skills
// and memory, with every conversation in the portable session form; `_asp/import` takes sessions in.
// DESIGN.md "ACP mapping", man lnk-link-harness-acp(7) and lnk-link-harness-session(5).
import { z } from "zod";
import { ASP_KINDS, AspExportParams, AspImportParams, describeIssues, type AspImportResult, type AspLeftBehind, type AspState } from "../protocol/index.js";
import type { AgentRef } from "../store/index.js";
import { exportState } from "../asp/export.js";
import { ENDPOINT_EXPORTED, InvalidSessions, exportSessions, importSessions } from "../asp/sessions.js";
import type { Logger } from "./deps.js";
import { ParamsError, SessionLink, parseLink } from "./meta.js";

export const ASP_EXPORT = "_asp/export";
export const ASP_IMPORT = "_asp/import";

/** Answers `_asp/export {kinds?}`: the State of the kinds asked that it gives; each file it left is logged. */
export function aspExport(raw: unknown, agent: AgentRef, served: readonly string[], log: Logger): AspState {
  const parsed = AspExportParams.safeParse(raw ?? {});
  if (!parsed.success) throw new ParamsError(describeIssues(parsed.error));
  parseLink(SessionLink, parsed.data._meta, served);
  const kinds = parsed.data.kinds ?? ENDPOINT_EXPORTED;
  const { state, left } = exportState(agent, kinds);
  if (kinds.includes("sessions")) {
    const sessions = exportSessions(agent);
    state.sessions = sessions.sessions;
    left.push(...sessions.left);
  }
  for (const l of left) log.warn("left out of the export", { path: l.path, why: l.why });
  return state;
}

/**
 * Answers `_asp/import`: an ASP State whose sessions are each written as a new conversation; every
 * other kind in it is left behind, named. Invalid params are refused whole, with nothing written.
 */
export async function aspImport(raw: unknown, agent: AgentRef, served: readonly string[]): Promise<AspImportResult> {
  // The sessions are checked by importSessions, which names an event's wrong field by its kind.
  const parsed = AspImportParams.extend({ sessions: z.unknown() }).safeParse(raw ?? {});
  if (!parsed.success) throw new ParamsError(describeIssues(parsed.error));
  const { _meta, sessions, ...rest } = parsed.data;
  parseLink(SessionLink, _meta, served);
  const leftBehind: AspLeftBehind[] = [];
  // A kind that holds nothing (an empty text or list) leaves nothing behind.
  for (const kind of ASP_KINDS) {
    const value: unknown = rest[kind as keyof typeof rest];
    if (value !== undefined && (typeof value !== "string" || value !== "") && (!Array.isArray(value) || value.length > 0)) {
      leftBehind.push({ kind, why: `${ASP_IMPORT} takes sessions only` });
    }
  }
  try {
    const imported = await importSessions(agent, sessions === undefined ? [] : sessions);
    return { imported, leftBehind };
  } catch (e) {
    if (e instanceof InvalidSessions) throw new ParamsError(e.message);
    throw e;
  }
}
