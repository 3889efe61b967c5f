// ASP's portable forms of agent state (link_harness_contract::asp::State).
import { z } from "zod";
import { Note } from "./settings.js";
import { Event } from "./events.js";
import { AspKind } from "./contract.js";

export const AspSkill = z.object({ name: z.string().min(1), files: z.record(z.string(), z.string()) }).strict();

export const AspSession = z
  .object({ thread: z.string().min(1), events: z.array(Event) })
  .strict();

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
