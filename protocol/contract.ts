// The Contract: what a harness adapter says of itself (spec/contract.txt).
import { z } from "zod";

export const CONTRACT_VERSION = 2 as const;

/** Every feature id the contract names (link_harness_contract::harness::features::Feature). */
export const FEATURES = [
  "instructions",
  "repo-instructions",
  "persona",
  "skills",
  "parts",
  "images",
  "attachments",
  "from",
  "subagents",
  "schedules",
  "proactive",
  "folders",
  "link-tools",
  "shell",
  "file-read",
  "file-edit",
  "code-search",
  "diffs",
  "lsp",
  "groups",
  "streaming",
  "activity",
] as const;
export const Feature = z.enum(FEATURES);
export type Feature = z.infer<typeof Feature>;

/** "spec": as the agent's spec says; "native": the harness's own way. */
export const FeatureWay = z.enum(["spec", "native"]);

/** ASP's kinds of agent state. */
export const ASP_KINDS = ["sessions", "instructions", "skills", "tools", "memory", "settings"] as const;
export const AspKind = z.enum(ASP_KINDS);
export type AspKind = z.infer<typeof AspKind>;

export const SESSION_CONTENT = ["tools", "thinking", "images", "audio", "resources", "other"] as const;

export const Contract = z
  .object({
    version: z.number().int().nonnegative(),
    proxy: z.boolean(),
    proof: z.boolean().optional(),
    agent: z.boolean().optional(),
    ports: z.number().int().nonnegative().optional(),
    instructions: z.boolean().optional(),
    from: z.boolean().optional(),
    recover: z.boolean().optional(),
    tools: z.boolean().optional(),
    parts: z.boolean().optional(),
    folders: z.boolean().optional(),
    prompt: z.boolean().optional(),
    conversations: z.boolean().optional(),
    chats: z.boolean().optional(),
    shared: z.boolean().optional(),
    blank: z.boolean().optional(),
    acp: z.boolean().optional(),
    state: z.object({ export: z.array(AspKind), import: z.array(AspKind) }).strict().optional(),
    notes: z.boolean().optional(),
    native_memory: z.boolean().optional(),
    identity: z.boolean().optional(),
    // A feature or a way this Link doesn't know is left out, never the whole contract refused:
    // so the map's keys are strings, and Link Harness's own list uses only known ids.
    features: z.record(z.string(), FeatureWay).optional(),
    session_content: z.array(z.enum(SESSION_CONTENT)).optional(),
  })
  .strict();
export type Contract = z.infer<typeof Contract>;
