/**
 * The Placement reporter holds no copy of the fleet (issue 42, decision 85):
 * against the real placement-api, a reporter over a scheduler side that
 * counts what is read reads the fleet one host at a time (never more than a
 * host's devices in one read), and a change to one host's device reads and
 * writes that host only. The side is a stand-in for the store here so that
 * what the reporter asks of it can be counted; bench/fleet.ts measures the
 * memory at a million devices.
 */
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HostName, newUuid } from '../../src/identifiers.js';
import { type DeviceRecord, newDevice, setStatus } from '../../src/server/scheduler/domain/device-state.js';
import { hostName, pciFacts } from '../../src/server/scheduler/domain/fixtures.support.js';
import type { DeviceEvent } from '../../src/server/scheduler/domain/inventory.js';
import { PlacementApi } from '../../src/server/scheduler/placement/api.js';
import { PlacementConnection } from '../../src/server/scheduler/placement/connection.js';
import type { HostView } from '../../src/server/scheduler/placement/desired.js';
import { NoAuth } from '../../src/server/scheduler/placement/keystone.js';
import type { SchedulerSide } from '../../src/server/scheduler/placement/port.js';
import { Reporter } from '../../src/server/scheduler/placement/reporter.js';
import { type PlacementServer, providerView, startPlacementServer } from '../helpers/placement.js';
import { available, placementApi } from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const have = available(placementApi(), 'the Placement reporter in bounded memory');
const HOSTS = 100;
const VFS = 20;
const PF = '0000:3b:00.0';
const NOW = '2026-01-01T00:00:00.000Z';

/** A scheduler side over devices in memory that counts the reporter's reads. */
class CountingSide implements SchedulerSide {
  readonly devices = new Map<string, DeviceRecord[]>();
  private events: DeviceEvent[] = [];
  private rev = 1;
  private version = 0;
  private readonly waiters = new Set<() => void>();
  /** Every hostDevices read: the host and how many devices it returned. */
  readonly reads: Array<{ host: string; devices: number }> = [];

  change(device: DeviceRecord, removed = false): void {
    const list = (this.devices.get(device.host) ?? []).filter((d) => d.uuid !== device.uuid);
    this.devices.set(device.host, removed ? list : [...list, device]);
    this.events.push({ revision: ++this.rev, device, removed });
    this.version++;
    for (const w of this.waiters) w();
  }

  revision = async () => this.rev;
  hostDevices = async (host: HostName) => {
    const out = this.devices.get(host) ?? [];
    this.reads.push({ host, devices: out.length });
    return out;
  };
  private names = () => [...this.devices.keys()].sort();
  hostsPage = async (after: string, limit: number): Promise<HostView[]> =>
    this.names()
      .filter((h) => h > after)
      .slice(0, limit)
      .map((h) => ({ name: hostName(h), connected: true }));
  hosts = async (): Promise<HostView[]> => this.names().map((h) => ({ name: hostName(h), connected: true }));
  changesSince = async (revision: number, limit: number) =>
    this.events.filter((e) => e.revision > revision).slice(0, limit);
  get changeVersion() {
    return this.version;
  }
  waitForChange(seen: number, signal: AbortSignal, maxWaitMs: number): Promise<void> {
    if (this.version !== seen || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.waiters.delete(done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const t = setTimeout(done, maxWaitMs);
      this.waiters.add(done);
      signal.addEventListener('abort', done);
    });
  }
  ownsHost = () => true;
  device = async () => null;
  latestCleanupJob = async () => null;
  scrubUsedOutsideBerth(): never {
    throw new Error('the reporter never scrubs');
  }
}

describe.skipIf(!have)('the Placement reporter in bounded memory', () => {
  let placement: PlacementServer;
  let reporter: Reporter;
  const side = new CountingSide();
  const host = (i: number) => `bounded-${String(i).padStart(3, '0')}`;
  const provider = (i: number) => `${host(i)}_${PF.toUpperCase()}`;

  beforeAll(async () => {
    placement = await startPlacementServer();
    for (let h = 0; h < HOSTS; h++) {
      side.devices.set(
        host(h),
        Array.from({ length: VFS }, (_, i) =>
          newDevice(
            hostName(host(h)),
            pciFacts({
              address: `0000:3b:0${Math.floor((i + 1) / 8)}.${(i + 1) % 8}`,
              functionKind: 'VF',
              physfn: PF,
            }),
            newUuid(),
            NOW,
          ),
        ),
      );
    }
    const api = new PlacementApi({ url: placement.url, auth: new NoAuth('admin'), timeoutMs: 10_000 });
    const logger = pino({ level: 'silent' });
    reporter = new Reporter({
      conn: new PlacementConnection(api, logger),
      side,
      logger,
      nodename: (h) => h,
      hostOf: (n) => n,
      createRoots: true,
      pollMs: 200,
      resyncMs: 3_600_000,
      driftMs: 3_600_000,
      retryMaxMs: 500,
    });
    reporter.start();
  }, 180_000);

  afterAll(async () => {
    await reporter?.stop();
    await placement?.stop();
  });

  it(`reads ${HOSTS * VFS} devices one host at a time, each host once, and writes every host`, async () => {
    await eventually(
      () => reporter.pendingCount === 0 && reporter.lastFullSyncAt !== null,
      (done) => done,
      240_000,
    );
    // Never more than one host's devices in one read, and every host read once.
    expect(Math.max(...side.reads.map((r) => r.devices))).toBe(VFS);
    expect(side.reads.map((r) => r.host).sort()).toEqual([...side.devices.keys()].sort());
    const owned = await placement.ok<{ resource_providers: Array<{ name: string }> }>(
      'GET',
      '/resource_providers?required=CUSTOM_OWNER_BERTH',
    );
    expect(owned.resource_providers).toHaveLength(2 * HOSTS);
    const seven = await providerView(placement, provider(7));
    expect(Object.values(seven!.inventories)[0]).toMatchObject({ total: VFS, reserved: 0 });
  }, 300_000);

  it('re-plans only the host of a changed device, and deletes a provider whose devices went', async () => {
    side.reads.length = 0;
    const vf = side.devices.get(host(7))![3]!;
    side.change(setStatus(vf, 'maintaining'));
    await eventually(
      async () => Object.values((await providerView(placement, provider(7)))!.inventories)[0]?.reserved,
      (r) => r === 1,
      30_000,
    );
    expect(side.reads.map((r) => r.host)).toEqual([host(7)]);
    expect(Object.values((await providerView(placement, provider(6)))!.inventories)[0]?.reserved).toBe(0);

    // Every device of host 8 goes: its provider goes too, found from the changes alone (host 8 has no device left to name it).
    side.reads.length = 0;
    for (const d of [...side.devices.get(host(8))!]) side.change(d, true);
    await eventually(
      () => providerView(placement, provider(8)),
      (v) => v === null,
      30_000,
    );
    expect(new Set(side.reads.map((r) => r.host))).toEqual(new Set([host(8)]));
    await eventually(
      () => reporter.pendingCount,
      (n) => n === 0,
      30_000,
    );
  }, 60_000);
});
