export * from "./errors.js";
export { parseInput } from "./parse.js";
export { newId, ID_PATTERN } from "./ids.js";
export { privateDir } from "./private-dir.js";
export { mapLimit } from "./map-limit.js";
export { ipToInt, intToIp, parseCidr, inCidr, isCidr } from "./cidr.js";
export * from "./frames.js";
export { ExecOutput, type ExecOutputFlow } from "./exec-output.js";
export * from "./messages.js";
export * as api from "./api.js";
export * as host from "./host.js";
export * as e2b from "./e2b/envd.js";
export type {
  HostAgent, HostVms, HostVolumes, HostTemplates, HostSnapshots, HostGuest, GuestChunk, GuestFileOwner, GuestMetrics, GuestCommand, GuestExecOptions, GuestExecProcess, GuestExecResult, GuestExit, GuestFileSource, HostCreateSpec, HostSandboxInfo, HostInventory, VolumeImage,
  HostTemplate, ObjectDigest, StoredDigests, StoredRef, TemplateBuildSpec, TransferEvent, VolumeSpec,
} from "./host.js";
export { inventoryCpuSeconds } from "./host.js";
export * as e2bApi from "./e2b/rest.js";
export * as e2bVolumes from "./e2b/volume-content.js";
export * as e2bTemplates from "./e2b/templates.js";
