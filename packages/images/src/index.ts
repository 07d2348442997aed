export * from "./recipe.js";
export * from "./build.js";
export * from "./oci/index.js";
export * from "./dockerfile.js";
