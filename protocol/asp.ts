// ASP's portable forms of agent state (link_harness_contract::asp::State).
import { z } from "zod";
import { Note } from "./settings.js";
import { AspKind } from "./contract.js";
import { SessionForm } from "./session-form.js";

export const AspSkill = z.object({ name: z.string().min(1), files: z.record(z.string(), z.string()) }).strict();

/** A session in ASP's State: the portable session form (session-form.ts). */
export const AspSession = SessionForm;

export const AspState = z
  .object({
    instructions: z.string().optional(),
    skills: z.array(AspSkill).optional(),
    memory: z.array(Note).optional(),
    sessions: z.array(AspSession).optional(),
  })
  .strict();
export type AspState = z.infer<typeof AspState>;

/** `_asp/export`'s params: the kinds asked (left out, every kind the harness gives). */
export const AspExportParams = z
  .object({
    kinds: z.array(AspKind).optional(),
    _meta: z.record(z.string(), z.unknown()).nullish(),
  })
  .strict();
export type AspExportParams = z.infer<typeof AspExportParams>;

/** `_asp/import`'s params: an ASP State (and the request's `_meta`). */
export const AspImportParams = AspState.extend({ _meta: z.record(z.string(), z.unknown()).nullish() }).strict();
export type AspImportParams = z.infer<typeof AspImportParams>;

/** A session written in: the thread it had, the new conversation's thread, and how many events it holds. */
export interface AspImported {
  kind: AspKind;
  thread: string;
  as: string;
  events: number;
}

/** What an import did not carry, by its kind, and why. */
export interface AspLeftBehind {
  kind: AspKind;
  why: string;
}

/** `_asp/import`'s answer. */
export interface AspImportResult {
  imported: AspImported[];
  leftBehind: AspLeftBehind[];
}
