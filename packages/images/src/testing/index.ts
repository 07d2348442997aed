export * from "./registry.js";
export * from "./images.js";
