/** The controller a cleanup works on, and how its steps run nvme-cli. */

import type { StorageTarget } from '../cleanup-evidence.js';
import type { CommandResult } from '../command-runner.js';
import type { PciFunction } from '../types.js';
import type { IdCtrl } from './nvme-output.js';
import type { NvmeControllerInfo, NvmeNamespaceInfo } from './sysfs-nvme.js';

/** The controller a cleanup works on, resolved fresh from sysfs at the start of the cleanup. */
export interface ResolvedController {
  fn: PciFunction;
  ctrl: NvmeControllerInfo;
  /** `<devRoot>/nvmeX`: the controller character device. */
  ctrlDev: string;
  id: IdCtrl;
  /** The /dev root namespaces' block devices live in. */
  devRoot: string;
}

/**
 * Runs nvme-cli for a cleanup step (the cleanup's abort signal applied):
 * resolves on exit 0, throws NvmeCommandError otherwise.
 */
export type RunNvme = (args: readonly string[], timeoutMs?: number) => Promise<CommandResult>;

/** The namespace's block device: the name sysfs gave it, under the /dev root. */
export const nsDevPath = (r: ResolvedController, ns: NvmeNamespaceInfo): string => `${r.devRoot}/${ns.name}`;

export const targetOf = (ns: NvmeNamespaceInfo): StorageTarget => ({
  name: ns.name,
  sizeBytes: ns.sizeBytes,
  blockSize: ns.lbaSize,
  nsid: ns.nsid,
});
