// Settings: the agent's config.json, as `configure` takes them (spec: contract.txt, decisions.txt).
import { z } from "zod";
import { BLOCK_MARK } from "./identity.js";
import { nestsWithin } from "./nesting.js";
import { notePathFault, noteSourceFault, noteTextFault } from "./notes.js";

/** Adds a fault found by a check as the issue of the value checked. */
function fault(ctx: z.RefinementCtx, why: string | undefined): void {
  if (why !== undefined) ctx.addIssue({ code: "custom", message: why });
}

const tokens = z.number().int().positive();

/** How deep a model parameter's value may nest, in arrays and objects (a response format's JSON schema nests a few levels). */
export const PARAMS_DEPTH_MAX = 64;

export const ModelSettings = z
  .object({
    provider: z.string().min(1),
    /** Sent to the endpoint as it is. */
    name: z.string().min(1),
    base_url: z.url({ protocol: /^https?$/ }),
    /** The key; left out, Link's proxy adds it and a placeholder is sent. Never echoed or logged. */
    key: z.string().optional(),
    /** The answer's share of the window ([model] answer). */
    answer: tokens.optional(),
    /**
     * Extra fields sent with each request as given (temperature, reasoning_effort, …), each nesting
     * no deeper than PARAMS_DEPTH_MAX: deeper, the settings could not be written as JSON, nor the request.
     */
    params: z
      .record(z.string(), z.unknown())
      .superRefine((params, ctx) => {
        for (const [key, value] of Object.entries(params)) {
          if (!nestsWithin(value, PARAMS_DEPTH_MAX)) ctx.addIssue({ code: "custom", path: [key], message: `nests deeper than ${PARAMS_DEPTH_MAX} arrays and objects` });
        }
      })
      .optional(),
  })
  .strict();

/** The spec's [window], in tokens. */
export const WindowSettings = z
  .object({
    /** The window you or a team set: taken as set, whatever is known of the model. */
    max: tokens.optional(),
    /** Link's own [window] max, from its defaults: held to the model's window. `max` wins over it. */
    link_max: tokens.optional(),
    /** The answer's share when the model names none. */
    answer: tokens.optional(),
    margin: z.number().int().nonnegative().optional(),
    /** The window of a model nobody described. */
    unknown: tokens.optional(),
    /** Whether a trained window a runtime (Ollama, LM Studio) reports counts beyond the context it loads a model with by default. */
    trained: z.boolean().optional(),
  })
  .strict();

/** Seconds; a day at most, so every bound fits a timer (Node's longest is 24.8 days). */
const seconds = z.number().positive().max(86_400);

/** Bounds on the model call and the tools, in seconds (man: lnk-link-harness-turn(7)). */
export const TimeoutsSettings = z
  .object({
    /** The longest one request to the model may take, from sending it to its last chunk. */
    model: seconds.optional(),
    /** The longest the model's stream may go without a chunk of data (keepalive comments are not data). */
    model_idle: seconds.optional(),
    /** The longest wait before asking the model again that a provider may ask for; longer fails the turn. */
    retry_wait: z.number().nonnegative().max(86_400).optional(),
    /** The longest one tool call may take, progress reported or not. */
    tool_call: seconds.optional(),
    /** The longest a tool call may go without an answer or a progress report. */
    tool_idle: seconds.optional(),
  })
  .strict();
export type TimeoutsSettings = z.infer<typeof TimeoutsSettings>;

/** What each bound is when the settings name none, in seconds. */
export const TIMEOUT_DEFAULTS: Required<TimeoutsSettings> = {
  model: 1_800,
  model_idle: 300,
  retry_wait: 60,
  tool_call: 600,
  tool_idle: 120,
};

export const SECTION_NAMES = ["base", "model", "tools", "environment", "repository", "skills", "standing", "notes"] as const;
export const SectionName = z.enum(SECTION_NAMES);
export type SectionName = z.infer<typeof SectionName>;

/** One section of the instructions: replaced by `text`, and held to `max` characters. */
export const SectionSettings = z
  .object({
    text: z.string().optional(),
    max: z.number().int().nonnegative().optional(),
    owner: z.string().optional(),
  })
  .strict();

export const InstructionsSettings = z.partialRecord(SectionName, SectionSettings);

/** A text of the identity: it goes into Link's block, so it may not hold the block's markers. */
const IdentityText = z.string().refine((s) => !s.includes(BLOCK_MARK), `must not hold "${BLOCK_MARK}" (the block's markers)`);

/** A skill's name: a folder of <home>/.lnk/agent/skills/, so never a path. */
export const SkillName = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/, "must be letters, digits, '.', '_' or '-', starting with a letter or digit, at most 128")
  .refine((s) => !s.includes(".."), "must not hold '..'");

/** Who the agent is (contract.txt "Into the harness"): written into Link's block of instruction.md at configure. */
export const Identity = z
  .object({
    persona: IdentityText.optional(),
    owner: IdentityText.optional(),
    standing: IdentityText.optional(),
    /** Skills Link copied to <home>/.lnk/agent/skills/<name>/, offered like the agent's own. */
    skills: z.array(SkillName).optional(),
  })
  .strict();
export type Identity = z.infer<typeof Identity>;

/** A note: its path on the harness it was remembered on, its text, and that harness (link, hermes, openclaw). */
export const Note = z
  .object({
    path: z.string().min(1).superRefine((v, ctx) => fault(ctx, notePathFault(v))),
    text: z.string().superRefine((v, ctx) => fault(ctx, noteTextFault(v))),
    source: z.string().min(1).superRefine((v, ctx) => fault(ctx, noteSourceFault(v))),
  })
  .strict();
export type Note = z.infer<typeof Note>;

/** A tool the settings name: an http(s) URL (Streamable HTTP) or a command line (stdio). */
export const ToolSource = z.string().min(1);

export const VERBOSITIES = ["off", "new", "all", "verbose"] as const;
export const Verbosity = z.enum(VERBOSITIES);
export type Verbosity = z.infer<typeof Verbosity>;

export const Settings = z
  .object({
    model: ModelSettings,
    window: WindowSettings.optional(),
    instructions: InstructionsSettings.optional(),
    identity: Identity.optional(),
    remembered: z.array(Note).optional(),
    /** Tools by name, beside those Link's bridge names in the environment. */
    tools: z.record(z.string().regex(/^[a-z0-9][a-z0-9_-]*$/), ToolSource).optional(),
    /** The environment as Link resolved it at its start: the files folder and channels. */
    environment: z
      .object({ files: z.string().optional(), channels: z.array(z.string()).optional() })
      .strict()
      .optional(),
    /** The chat's verbosity when a message names none (spec [connections] activity). */
    verbosity: Verbosity.optional(),
    timeouts: TimeoutsSettings.optional(),
  })
  .strict();
export type Settings = z.infer<typeof Settings>;
