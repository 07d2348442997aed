export * from "./recipe.js";
export * from "./build.js";
