/** The directory of the dashboard's static assets (everything the browser may load). */
export declare const assetsDir: string;
