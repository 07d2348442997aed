/** Typed request and reply bodies of the guest agent protocol (PROTOCOL.md). */

export interface PtySize {
  rows: number;
  cols: number;
}

export interface ExecRequest {
  op: "exec";
  argv?: string[];
  cmd?: string;
  /** A user of the guest's /etc/passwd (agent feature `exec.user`); default root. */
  user?: string;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: boolean;
  stdin_data?: string;
  timeout_ms?: number;
  pty?: PtySize;
  mode?: "stream" | "buffer";
  window?: number;
  buffer_bytes?: number;
}

export interface ExecStarted {
  proc: number;
  pid: number;
  window?: number;
}

export interface ExitEvent {
  event: "exit";
  proc: number;
  exit_code: number | null;
  signal: number | null;
  timed_out: boolean;
}

export interface ProcInfo {
  proc: number;
  pid: number;
  argv?: string[];
  cmd?: string;
  mode: "stream" | "buffer";
  running: boolean;
  exit_code: number | null;
  signal: number | null;
  timed_out: boolean;
  started_ms: number;
}

export interface ProcReadReply {
  data: string;
  offset: number;
  next_offset: number;
  dropped: boolean;
  eof: boolean;
}

export type ProcWaitReply =
  | { running: true }
  | { running: false; exit_code: number | null; signal: number | null; timed_out: boolean };

export type FileType = "file" | "dir" | "symlink" | "other";

export interface FileStat {
  type: FileType;
  size: number;
  mode: number;
  mtime_ms: number;
  uid: number;
  gid: number;
  target?: string;
}

export interface DirEntry {
  name: string;
  type: FileType;
  size: number;
  mode: number;
  mtime_ms: number;
}

export interface HelloReply {
  protocol: number;
  agent: string;
  boot_id: string;
  pid: number;
  /** What the agent does beyond protocol 1's first version (absent: nothing). */
  features?: string[];
}

/** Agent features (the hello's `features`) the host checks before relying on them. */
export type AgentFeature = "exec.user" | "file.owner" | "file.xattr" | "sys.metrics" | "volumes";

/** Reply to `sys.metrics`: raw counters; CPU in USER_HZ ticks since boot over all CPUs. */
export interface SysMetrics {
  timestamp_ms: number;
  cpu_count: number;
  cpu_total_ticks: number;
  cpu_busy_ticks: number;
  mem_total_kb: number;
  mem_available_kb: number;
  mem_cache_kb: number;
  disk_total_bytes: number;
  disk_used_bytes: number;
}

export interface SysInfo {
  uptime_ms: number;
  mem_total_kb: number;
  mem_available_kb: number;
  procs_running: number;
}

/** Reply to `tcp.connect`: the tunnel is open; `window` is the host's first credit on channel 0. */
export interface TcpConnectReply {
  window: number;
}

/** The last frame of a tunnel: both directions finished, or `error` (reset, socket error). */
export interface TunnelClosedEvent {
  event: "closed";
  error?: string;
}

/** A TCP socket listening inside the guest (`net.ports`). */
export interface ListeningPort {
  port: number;
  /** The bound address: "0.0.0.0", "::", "127.0.0.1", ... */
  address: string;
  family: 4 | 6;
  /** The process holding the socket, when the agent could tell. */
  pid?: number;
  process?: string;
}

export interface NetSetup {
  dev: string;
  mac: string;
  address: string;
  prefix: number;
  gateway: string;
  dns: string;
}

/** Every op the agent understands, with the reply it gives. */
export interface AgentOps {
  "sys.hello": { req: { version: number; session: string }; res: HelloReply };
  "sys.ping": { req: Record<string, never>; res: Record<string, never> };
  "sys.quiesce": { req: Record<string, never>; res: Record<string, never> };
  "sys.clock": { req: { unix_ms: number }; res: Record<string, never> };
  "sys.entropy": { req: { seed: string }; res: Record<string, never> };
  "sys.limits": { req: { pids_max: number }; res: Record<string, never> };
  "sys.info": { req: Record<string, never>; res: SysInfo };
  /** The NIC's MAC, its address (the primary one, replaced), the default route (replaced) and /etc/resolv.conf. */
  "net.setup": { req: NetSetup; res: Record<string, never> };
  "proc.list": { req: Record<string, never>; res: { procs: ProcInfo[] } };
  "proc.read": { req: { proc: number; channel: 1 | 2; offset: number; max: number }; res: ProcReadReply };
  "proc.wait": { req: { proc: number; timeout_ms: number }; res: ProcWaitReply };
  "proc.stdin": { req: { proc: number; data: string; eof: boolean }; res: Record<string, never> };
  "proc.signal": { req: { proc: number; signal: number }; res: Record<string, never> };
  "proc.kill": { req: { proc: number }; res: Record<string, never> };
  "proc.release": { req: { proc: number }; res: Record<string, never> };
  "pty.resize": { req: { proc: number; rows: number; cols: number }; res: Record<string, never> };
  "stream.cancel": { req: { stream: number }; res: Record<string, never> };
  "file.stat": { req: { path: string }; res: FileStat };
  "file.list": { req: { path: string }; res: { entries: DirEntry[]; truncated: boolean } };
  "file.mkdir": { req: { path: string; parents: boolean; mode?: number; user?: string }; res: Record<string, never> };
  "file.setxattr": { req: { path: string; attrs: Record<string, string> }; res: Record<string, never> };
  "file.getxattrs": { req: { path: string }; res: { attrs: Record<string, string>; truncated: boolean } };
  "sys.metrics": { req: Record<string, never>; res: SysMetrics };
  /** Mounts the ext4 of volume slot `slot` (virtio-blk serial den-vol-<slot>) at `path`. */
  "vol.mount": { req: { slot: number; path: string; read_only: boolean }; res: Record<string, never> };
  /** Flushes and unmounts; `released: false` when a process still holds files on it (it stays mounted). */
  "vol.release": { req: { path: string }; res: { released: boolean } };
  /** Lazily unmounts a mount whose media is gone; `free`: nothing holds the slot's device any more. */
  "vol.detach": { req: { slot: number; path: string }; res: { free: boolean } };
  /** Grows a mounted read-write volume's filesystem to `bytes`. */
  "vol.grow": { req: { path: string; bytes: number }; res: Record<string, never> };
  "file.remove": { req: { path: string; recursive: boolean }; res: Record<string, never> };
  "file.rename": { req: { from: string; to: string }; res: Record<string, never> };
  "tcp.connect": { req: { port: number; host?: string; window?: number }; res: TcpConnectReply };
  "net.ports": { req: Record<string, never>; res: { ports: ListeningPort[]; truncated: boolean } };
}

export type AgentOp = keyof AgentOps;
