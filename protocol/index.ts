export * from "./contract.js";
export * from "./settings.js";
export * from "./events.js";
export * from "./conversation.js";
export * from "./agents.js";
export * from "./asp.js";
export * from "./model-facts.js";
export * from "./errors.js";
