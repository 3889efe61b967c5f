export * from "./paths.js";
export * from "./files.js";
export * from "./events.js";
export * from "./lock.js";
export * from "./settings.js";
export * from "./conversation.js";
export * from "./answers.js";
export * from "./tree.js";
