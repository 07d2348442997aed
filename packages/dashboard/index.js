import { fileURLToPath } from "node:url";

/** The directory of the dashboard's static assets (everything the browser may load). */
export const assetsDir = fileURLToPath(new URL("./public/", import.meta.url));
