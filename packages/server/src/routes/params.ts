import { z } from "zod";

/** The `:id` of a sandbox or checkpoint route: bounded here, validated by the control plane. */
export const IdParams = z.object({ id: z.string().max(64) });
