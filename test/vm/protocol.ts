/**
 * What the host hands the guest (the plan, in the initramfs) and what the
 * guest hands back (JSON lines on its second serial port). The guest has no
 * network: these two files and the namespace backing files are the only ways
 * in and out.
 */

/** Everything the guest's orchestrator needs; paths are host paths (the guest chroots into the host's root). */
export interface GuestPlan {
  /** The checkout: `<repo>/bin/berth` runs unchanged inside the guest. */
  repo: string;
  /** buf's own binary (not the npm wrapper, which would start node first). */
  buf: string;
  nvmeCli: string;
  /** The guest's writable work dir (tmpfs): the plan, the agent's state. */
  workDir: string;
  /** Where the JSON lines go: the guest's second serial port. */
  resultsDevice: string;
  /** The agent's configuration file and its static token (role admin). */
  agentConfig: string;
  token: string;
  /** PCI addresses whose controllers the guest describes with nvme-cli before Berth runs (oracles). */
  controllers: string[];
  /** CleanupDevice calls, run concurrently once the agent serves. */
  cleanups: { address: string; jobId: string }[];
  /**
   * Commands nvme-cli runs itself after the cleanups, on the first namespace
   * of the controller at `address` (`{ns}` in argv is replaced by its /dev
   * path): the controller's own answer, to compare Berth's report with.
   */
  probes: { address: string; argv: string[] }[];
  /** Bound on every step in the guest (a command, the agent's start). */
  stepTimeoutMs: number;
  /** Run Berth's dry run (`berth agent discover`); default true. */
  dryRun?: boolean;
  /** `nvme id-ns <controller> -n <nsid> -o json` for each, before Berth runs (oracles of the namespaces' identifiers). */
  idNs?: { address: string; nsid: number }[];
  /** RecordBinding calls, one after the other, once the agent serves (before the cleanups). */
  bindings?: { address: string; arqUuid: string; instanceUuid: string }[];
  /** Call ListDevices once the bindings and cleanups are done. */
  listDevices?: boolean;
  /** A directory on a writable share: the agent's state dir is copied there after it stopped… */
  saveState?: string;
  /** …and from there into the state dir before it starts (the next boot of the same host). */
  restoreState?: string;
  /**
   * After the cleanups: follow the agent's WatchInventory (buf curl), say
   * `hotplug-ready` once its snapshot is in, then report every event about
   * `address` — the host plugs an NVMe controller there and pulls it — until
   * it is removed, or `timeoutMs` passed.
   */
  hotplug?: { address: string; timeoutMs: number };
  /**
   * After the cleanups (before the hotplug): the guest writes to the first
   * namespace of `address` outside Berth (dd, 64 KiB) after Berth recorded it
   * clean, with the controller's SMART log read by nvme-cli before and after;
   * then Rediscover and ListDevices (the agent must call the media dirty),
   * CleanupDevice again (`jobId`) and ListDevices (clean again).
   */
  writeAfterClean?: { address: string; jobId: string };
}

/** How a process ended, with everything it printed. */
export interface RunResult {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
  ms: number;
}

/** A command the guest ran, as it ran. */
export interface CommandRecord extends RunResult {
  type: 'command';
  name: string;
  argv: string[];
}

/** One CleanupDevice call through buf curl: every streamed response, parsed. */
export interface CleanupRecord {
  type: 'cleanup';
  address: string;
  jobId: string;
  exitCode: number | null;
  timedOut: boolean;
  responses: unknown[];
  stderr: string;
  ms: number;
}

/** One unary call through buf curl: the response as JSON, or the error buf curl printed. */
export interface RpcRecord {
  type: 'rpc';
  method: string;
  request: unknown;
  exitCode: number | null;
  response: unknown;
  stderr: string;
}

/** One WatchInventory event about the hot-plugged address, as the guest received it. */
export interface InventoryRecord {
  type: 'inventory';
  kind: 'added' | 'changed' | 'removed';
  address: string;
  /** The device as the agent reported it (proto3 JSON), for added and changed. */
  device?: Record<string, unknown>;
  uptime: number;
}

export type GuestRecord =
  | RpcRecord
  | { type: 'state'; saved?: string[]; restored?: string[] }
  | { type: 'start'; uptime: number; kernel: string; netdevs: string[] }
  | CommandRecord
  | { type: 'agent'; listening: string | null; error?: string }
  | CleanupRecord
  | { type: 'agent-log'; lines: string[] }
  | { type: 'hotplug-ready'; uptime: number }
  | InventoryRecord
  | { type: 'hotplug-end'; removed: boolean; error?: string }
  | { type: 'error'; message: string }
  | { type: 'done'; uptime: number };
