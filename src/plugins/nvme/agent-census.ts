/**
 * The agent's census of a device's media, as the plugin host offers it to the
 * cleanup runner: which devices have one, and taking it with the nvme-cli the
 * managing driver's section names. It is chosen by the device (type NVME, or
 * PCI class 0108xx), never by the driver, so a vendor driver cannot opt out of
 * being checked (docs/drivers.md, "Your targets are checked against the
 * agent's census").
 */
import { ConfigError } from '../../errors.js';
import { show } from '../device-spec/messages.js';
import type { HostContext } from '../driver.js';
import type { DiscoveredDevice } from '../types.js';
import { type NvmeCensus, takeNvmeCensus } from './census.js';

/** Whether the agent takes a census of this device's media around a cleanup (NVMe: by type or by PCI class). */
export function hasNvmeCensus(device: Pick<DiscoveredDevice, 'type' | 'classCode'>): boolean {
  return device.type === 'NVME' || device.classCode.startsWith('0108');
}

/** The census for one driver's devices: its section's nvme-cli, read once at load. */
export interface AgentCensus {
  /**
   * Every allocated namespace of the subsystem and its capacity
   * (census.ts). `probe`: also ask whether namespace management works where
   * that decides the coverage, and read the write counters (after the cleanup:
   * the clean record and the certificate are made with them).
   */
  take(
    device: DiscoveredDevice,
    roots: Pick<HostContext, 'sysfsRoot' | 'devRoot' | 'runner'>,
    signal: AbortSignal,
    probe: boolean,
  ): Promise<NvmeCensus>;
}

/** The census for the driver whose section is `section`, under `key`. */
export function agentCensusFor(key: string, section: Record<string, unknown>): AgentCensus {
  const nvmeCli = nvmeCliOf(key, section);
  return {
    take: (device, roots, signal, probe) =>
      takeNvmeCensus(device.address, {
        sysfsRoot: roots.sysfsRoot,
        devRoot: roots.devRoot,
        runner: roots.runner,
        nvmeCli,
        signal,
        probe,
        counters: probe,
      }),
  };
}

/** A section's `nvme_cli` (a driver's own parser has already refused a bad one), else `nvme`. */
function nvmeCliOf(key: string, section: Record<string, unknown>): string {
  const v = section.nvme_cli;
  if (v === undefined || v === null) return 'nvme';
  if (typeof v !== 'string' || v.trim() === '' || v.includes('\0')) {
    throw new ConfigError(`${key}.nvme_cli: ${show(v)} is not a program name or path`);
  }
  return v.trim();
}
