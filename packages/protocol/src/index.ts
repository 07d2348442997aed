export * from "./errors.js";
export * from "./frames.js";
export * from "./messages.js";
