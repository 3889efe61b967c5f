// Models' facts: windows and answers' shares, as data (decisions.txt "Where does a model's window come from?").
import { z } from "zod";

export const ModelFact = z
  .object({
    /** The model's window, in tokens. */
    window: z.number().int().positive().optional(),
    /** Its longest answer, in tokens. */
    answer: z.number().int().positive().optional(),
  })
  .strict();
export type ModelFact = z.infer<typeof ModelFact>;

export const ModelFacts = z.object({ models: z.record(z.string(), ModelFact).default({}) }).strict();
export type ModelFacts = z.infer<typeof ModelFacts>;
