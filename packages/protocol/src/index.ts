export * from "./errors.js";
export * from "./frames.js";
export * from "./messages.js";
export * as api from "./api.js";
