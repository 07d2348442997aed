/**
 * The example secrets deploy/*.env ship with, refused at start by `den serve` and `den host
 * run` (both read their configuration through loadConfig): an env file copied and not edited
 * would otherwise run a fleet whose secrets are in Den's own repository.
 */

/** Exact values: what deploy/*.env ship, and well-known defaults (MinIO's root credentials). */
const SHIPPED = new Set(["CHANGE-ME", "CHANGE-ME-a-long-random-string", "minioadmin"].map((v) => v.toLowerCase()));
/** Any value with these words in it is a placeholder, whatever surrounds them. */
const PATTERN = /change[-_ ]?me|replace[-_ ]?me|changeit/i;

/** The variables that hold secrets, and how to make a real one. */
const SECRETS: Record<string, string> = {
  DEN_API_KEY: "make one with `openssl rand -hex 32` (or leave DEN_API_KEY unset: the first start prints a key)",
  AWS_ACCESS_KEY_ID: "use the access key your S3 store issued for Den",
  AWS_SECRET_ACCESS_KEY: "use the secret key your S3 store issued for Den",
};

/** Where an operator learns how to move a fleet of the shared secret to certificates. */
export const FLEET_MIGRATION_DOC = "docs/many-machines.md#moving-a-running-fleet-to-certificates";

/**
 * Throws if DEN_HOST_SECRET is still set: the shared secret between machines is retired (every
 * link is mutual TLS), and a fleet's old unit file must stop the start, not be ignored.
 */
export function refuseRetiredHostSecret(env: NodeJS.ProcessEnv): void {
  if (env.DEN_HOST_SECRET !== undefined) throw new Error(`DEN_HOST_SECRET is retired: machines now link over mutual TLS; remove it and give this machine a certificate (see ${FLEET_MIGRATION_DOC})`);
}

export function isPlaceholderSecret(value: string): boolean {
  return SHIPPED.has(value.toLowerCase()) || PATTERN.test(value);
}

/** Throws, naming the variable and how to make a real value, if a secret in `env` is a placeholder. */
export function refusePlaceholderSecrets(env: NodeJS.ProcessEnv): void {
  for (const [name, how] of Object.entries(SECRETS)) {
    const v = env[name];
    if (v && isPlaceholderSecret(v)) throw new Error(`${name} is a placeholder (${JSON.stringify(v)}), not a secret: ${how}`);
  }
  const url = env.DEN_DATABASE_URL;
  if (url && /^postgres(ql)?:\/\//.test(url)) {
    let password = "";
    try {
      password = decodeURIComponent(new URL(url).password);
    } catch {
      // A malformed URL is databaseConfig's to refuse, with its own message.
    }
    if (password && isPlaceholderSecret(password)) {
      throw new Error("DEN_DATABASE_URL's password is a placeholder, not a secret: set the den role's real password (make one with `openssl rand -hex 32`, then `ALTER ROLE den PASSWORD '...'` in psql) and put it in the URL");
    }
  }
}
