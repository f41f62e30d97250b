/**
 * The write counters a drive keeps (decision 64, docs/media-identity.md), end
 * to end: a real scheduler and a real agent on a simulated host. A drive
 * comes back with SMART counters other than those its clean record was made
 * with — written outside Berth while every record said clean, or counters
 * that went down (a firmware reset, another drive with its identity) — and is
 * scrubbed before the next tenant gets it. Judged from the backing file and
 * from what the scheduler offered, never from Berth's own word.
 */
import { credentials } from '@grpc/grpc-js';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeCertificate } from '../../src/erasure/certificate.js';
import { type Device, DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import {
  DeviceServiceClient,
  type WatchDevicesResponse,
} from '../../src/gen/berth/scheduler/v1/device_service.js';
import type { SimHostDefinition } from '../../src/sim/host.js';
import {
  plantTenantData,
  readableTenantData,
  readNvmeSimState,
  setSmartCounters,
  spreadTenantWrites,
} from '../../src/sim/nvme-cli/index.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { createAndBind, createClassProfile, getDevice, stateName } from '../helpers/invariants.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'counters-host';
const ADDRESS = '0000:01:00.0';
const NVME_CLASS = 'CUSTOM_NVME_144D_A824';

const definition: SimHostDefinition = {
  host: HOST,
  pci: { functions: [] },
  pciDeviceSpec: [],
  nvme: [
    {
      address: ADDRESS,
      vendorId: '144d',
      productId: 'a824',
      controller: 'nvme0',
      serial: 'SER-COUNT',
      model: 'PM1733 (simulated)',
      caps: { ces: true },
      sanitizeMs: 300,
      namespaces: [{ nsid: 1, sizeBytes: 1 << 20 }],
    },
  ],
  nvmeDeviceSpec: [{ vendor_id: '144d' }],
};

/** Every state the device is seen in by WatchDevices from now on. */
function watch(endpoint: string) {
  const seen: Device[] = [];
  const raw = new DeviceServiceClient(endpoint, credentials.createInsecure());
  const stream = raw.watchDevices({ filter: undefined, fromRevision: 0 });
  stream.on('data', (m: WatchDevicesResponse) => {
    if (m.device?.address === ADDRESS && m.device.host === HOST) seen.push(m.device);
  });
  stream.on('error', () => {});
  return {
    seen,
    stop: () => {
      stream.cancel();
      raw.close();
    },
  };
}

const proven = (d: Device | null) =>
  d !== null && d.lastCleanup?.outcome === 1 /* SUCCEEDED */ && (d.lastCleanup.proof?.method ?? '') !== '';

describe('a drive whose write counters moved while its records said clean', () => {
  let c: Cluster;
  afterEach(async () => {
    await c?.stop();
  });

  /** The drive cleaned by Berth (its first cleanup: never cleaned before), available, its clean record made. */
  async function cleanDrive(): Promise<{ cleanups: number }> {
    c = await startCluster([definition]);
    await c.waitForDevices(HOST, 1);
    const d = await eventually(
      () => getDevice(c.client, HOST, ADDRESS),
      (x) => x.deviceState === DeviceState.DEVICE_STATE_AVAILABLE && proven(x),
      60_000,
    );
    const journal = c.host(HOST).agent!.journal;
    const record = journal.media.get(d.media!.key)!;
    expect(record.condition).toBe('clean');
    // The counters read right after the proven scrub: in the clean record and in the certificate.
    const sim = await readNvmeSimState(c.host(HOST).sim.nvmeStatePath);
    const counted = sim.controllers[0]!.smart!;
    expect(record.writeCounters).toMatchObject({
      controller: 'nvme0',
      dataUnitsWritten: counted.dataUnitsWritten,
      hostWriteCommands: counted.hostWriteCommands,
    });
    const [cert] = journal.certificates();
    expect(decodeCertificate(cert!.jws).claims.write_counters).toMatchObject({
      controller: 'nvme0',
      data_units_written: counted.dataUnitsWritten,
      host_write_commands: counted.hostWriteCommands,
    });
    return { cleanups: journal.certificates().length };
  }

  /**
   * The host comes back and tenant 2 asks at once. The agent's journal turns
   * the drive dirty with `reason`, and it is scrubbed (a new certificate)
   * before it is offered; what tenant 2 gets holds no tenant byte.
   */
  async function comesBack(before: { cleanups: number }, reason: RegExp): Promise<void> {
    const sim = c.host(HOST).sim;
    const seen = watch(c.scheduler.address);
    const logs: { msg: string; reason?: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => void logs.push(JSON.parse(l)) });
    await c.host(HOST).start({ logger });
    const early = await createAndBind(c.client, 'nvme', 'tenant-2', HOST).then(
      (arq) => arq,
      () => null,
    );
    const journal = c.host(HOST).agent!.journal;
    await eventually(
      () => Promise.resolve(journal.certificates().length),
      (n) => n > before.cleanups,
      60_000,
    );
    const bound = early ?? (await createAndBind(c.client, 'nvme', 'tenant-2', HOST));
    expect(bound.deviceAddress).toBe(ADDRESS);
    seen.stop();
    // What tenant 2 got: not one byte of what was written outside Berth.
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).toEqual([]);
    // The journal said why, naming the counters.
    const dirt = logs.find((l) => /recorded clean, is dirty now/.test(l.msg));
    expect(dirt?.reason, JSON.stringify(logs.map((l) => l.msg))).toMatch(reason);
    // Never offered between the host's return and the new proof.
    const firstJob = seen.seen[0]?.lastCleanup?.jobId;
    for (const d of seen.seen) {
      if (proven(d) && d.lastCleanup!.jobId !== firstJob) break;
      if (seen.seen.indexOf(d) > 0) expect(d.allocatable, stateName(d.deviceState)).toBe(false);
    }
    expect(seen.seen.some((d) => proven(d) && d.lastCleanup!.jobId !== firstJob)).toBe(true);
  }

  it('written outside Berth while its host was down: dirty by its counters, scrubbed before tenant 2', async () => {
    const before = await cleanDrive();
    const sim = c.host(HOST).sim;
    await createClassProfile(c.client, 'nvme', NVME_CLASS);
    await c.host(HOST).stop();
    // Written outside Berth: both records still say clean.
    await plantTenantData(sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1));
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).not.toEqual([]);
    expect(stateName((await getDevice(c.client, HOST, ADDRESS)).deviceState)).toBe('DEVICE_STATE_AVAILABLE');
    await comesBack(before, /written since it was recorded clean/);
  }, 240_000);

  it('counters lower than recorded (a firmware reset, another drive with its identity): dirty, scrubbed before tenant 2', async () => {
    const before = await cleanDrive();
    const sim = c.host(HOST).sim;
    await createClassProfile(c.client, 'nvme', NVME_CLASS);
    await c.host(HOST).stop();
    // Another drive with its identity (or its firmware reset the counters), holding a tenant's data.
    await plantTenantData(sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1));
    await setSmartCounters(sim.nvmeStatePath, 'nvme0', {
      dataUnitsWritten: '0',
      hostWriteCommands: '0',
      powerCycles: '0',
    });
    await comesBack(before, /went down since it was recorded clean.*its history is unknown/);
  }, 240_000);
});
