// SharedAgents (--agents) and Bind (--blank): how a process is told which agents it serves (spec: contract.txt).
import { z } from "zod";
import { Settings } from "./settings.js";

export const SharedAgent = z
  .object({
    name: z.string().min(1),
    id: z.string().min(1),
    owner: z.string().min(1),
    home: z.string().min(1),
    files: z.string().min(1),
    agent: z.string().min(1).optional(),
    port: z.number().int().min(0).max(65535),
    env: z.record(z.string(), z.string()),
  })
  .strict();
export const SharedAgents = z.array(SharedAgent);
export type SharedAgents = z.infer<typeof SharedAgents>;

export const BindAgent = z
  .object({ name: z.string().min(1), id: z.string().min(1), owner: z.string().min(1), teams: z.array(z.string()).optional() })
  .strict();

export const Bind = z
  .object({
    agent: BindAgent,
    key: z.string().min(1),
    settings: Settings,
    /** The agent's own folder (the store's one implementation). */
    store: z.string().min(1).optional(),
    /** The agent's files folder. */
    files: z.string().min(1).optional(),
  })
  .strict();
export type Bind = z.infer<typeof Bind>;

export const BindAnswer = z.union([z.object({}).strict(), z.object({ error: z.string() }).strict()]);
