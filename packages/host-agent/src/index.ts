export * from "./host-service.js";
export { Admission, defaultCapacity, memoryOvercommit, memoryReserveMb, type Capacity, type Shape } from "./admission.js";
export { buildHostServer, startHostServer, type HostServerOptions, type RunningHostServer } from "./http/server.js";
export { HttpHostAgent } from "./http/client.js";
export { hasSecret, checkSecret } from "./http/auth.js";
export { Registrar, type RegistrarOptions } from "./registrar.js";
export { HttpGuest } from "./http/guest-client.js";
export { WORK_HEADER, processCpuSeconds, reportHostWork, withHostWork } from "./work.js";
export { pacedInput, INPUT_HIGH_WATER } from "./http/paced-input.js";
