// Models' facts: windows, answers' shares and what a model reads, as data (decisions.txt "Where does a model's window come from?").
import { z } from "zod";

/** What a model takes in: text always; images and documents (PDF, text) when it reads them. */
export const MODEL_INPUTS = ["text", "image", "document"] as const;
export const ModelInput = z.enum(MODEL_INPUTS);
export type ModelInput = z.infer<typeof ModelInput>;

export const ModelFact = z
  .object({
    /** The model's window, in tokens. */
    window: z.number().int().positive().optional(),
    /** Its longest answer, in tokens. */
    answer: z.number().int().positive().optional(),
    /** What it reads: text, image, document. */
    inputs: z.array(ModelInput).min(1).optional(),
  })
  .strict();
export type ModelFact = z.infer<typeof ModelFact>;

export const ModelFacts = z.object({ models: z.record(z.string(), ModelFact).default({}) }).strict();
export type ModelFacts = z.infer<typeof ModelFacts>;
