/**
 * Custody, searched rather than hand-picked (issue 38, DESIGN invariant 15).
 *
 * A model-based test: fast-check draws sequences of the events that matter —
 * bind, release, pull a media out, insert it in another host, a host down or
 * up (rebooted or not), the scheduler's database lost, snapshotted or
 * restored to an older copy, an operator's release, a host's signing key
 * rotated — for two hosts, one NVMe
 * drive and one one-time-use GPU with a PCIe serial number. Each event is
 * carried out on the real thing: a real scheduler and real agents (their
 * journals on disk) on simulated hosts, in this process, on loopback. What the
 * test knows of the media is its own ground truth, never Berth's word: the
 * drive's bytes are read from its backing file, and the GPU is burned from the
 * moment a tenant got it until an operator releases it.
 *
 * After every event, and at every bind, the promise is checked: no device that
 * Berth offers (allocatable) or hands out reaches a tenant with another
 * tenant's bytes on it, or after a burn. A failure is shrunk by fast-check to
 * its shortest sequence and reported with its seed and path; each sequence it
 * ever found is kept below as a fixed case (`FOUND`), replayed on every run.
 *
 * `MODEL_RUNS` (default 6) and `MODEL_SEED` explore further:
 * `MODEL_RUNS=200 npx vitest run test/model/custody.model.test.ts`.
 */
import { copyFile, rm } from 'node:fs/promises';
import fc from 'fast-check';
import { describe, it } from 'vitest';
import { rotateSigningKey } from '../../src/server/agent/signing-key.js';
import type { CarriedNvme, SimHost, SimHostDefinition } from '../../src/sim/host.js';
import { plantTenantData, readableTenantData, spreadTenantWrites } from '../../src/sim/nvme-cli/index.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { createAndBind, createClassProfile, listChecked, stateName } from '../helpers/invariants.js';
import { eventually } from '../helpers/wait.js';

const HOSTS = ['custody-a', 'custody-b'] as const;
type HostId = (typeof HOSTS)[number];
const MIB = 1 << 20;
const NVME_CLASS = 'CUSTOM_NVME_144D_A824';
const GPU_CLASS = 'CUSTOM_PCI_10DE_25B6';
const GPU = {
  vendorId: '10de',
  productId: '25b6',
  classCode: '030200',
  driver: 'vfio-pci',
  deviceSerialNumber: 'a0-b1-c2-d3-e4-f5-06-17',
};
const DRIVE = {
  vendorId: '144d',
  productId: 'a824',
  serial: 'CUSTODY-1',
  model: 'PM1733 (simulated)',
  caps: { ces: true },
  sanitizeMs: 50,
  namespaces: [{ nsid: 1, sizeBytes: MIB }],
};

/** Both hosts manage both kinds; only custody-b has the media at the start. */
function definition(host: HostId): SimHostDefinition {
  const home = host === 'custody-b';
  return {
    host,
    // A NIC Berth does not manage, so that a host without the media has a PCI tree.
    pci: {
      functions: [
        { address: '0000:10:00.0', vendorId: '8086', productId: '1521' },
        ...(home ? [{ address: '0000:65:00.0', ...GPU }] : []),
      ],
    },
    nvme: home ? [{ ...DRIVE, address: '0000:01:00.0', controller: 'nvme0' }] : [],
    // Unused when the test starts: say so (a one-time-use device first seen with no record is held).
    pciDeviceSpec: [
      { vendor_id: '10de', product_id: '25b6', managed: false, one_time_use: true, assume_clean: true },
    ],
    // The drive is clean when the test starts: say so, so the first tenant can have it.
    nvmeDeviceSpec: [{ vendor_id: '144d', assume_clean: true }],
  };
}

/** The test's own account of the world: where each media is, and what is true of it. */
interface World {
  c: Cluster;
  up: Set<HostId>;
  drive: { at: HostId | null; address: string; controller: string; carried: CarriedNvme | null };
  gpu: { at: HostId | null; address: string; burned: boolean };
  /** Instances holding a binding (released by Release). */
  tenants: string[];
  snapshots: string[];
  next: number;
  log: string[];
}

const sim = (w: World, h: HostId): SimHost => w.c.host(h).sim;

/** The promise, judged from the media: nothing Berth offers holds a tenant's bytes or was burned. */
async function checkPromise(w: World, when: string): Promise<void> {
  for (const h of w.up) {
    const devices = await listChecked(w.c.client, h);
    for (const d of devices.filter((x) => x.allocatable)) {
      if (w.drive.at === h && d.address === w.drive.address) {
        const bytes = await readableTenantData(sim(w, h).nvmeStatePath, w.drive.controller);
        if (bytes.length > 0) {
          throw new Error(`${when}: the drive is offered on ${h} ${d.address} with a tenant's bytes on it`);
        }
      }
      if (w.gpu.at === h && d.address === w.gpu.address && w.gpu.burned) {
        throw new Error(`${when}: the burned GPU is offered on ${h} ${d.address}`);
      }
    }
  }
}

type Cmd = fc.AsyncCommand<World, World>;

class Bind implements Cmd {
  constructor(readonly kind: 'drive' | 'gpu') {}
  check = (w: Readonly<World>) => {
    const at = w[this.kind].at;
    return at !== null && w.up.has(at);
  };
  async run(_m: World, w: World) {
    const media = w[this.kind];
    const host = media.at!;
    const tenant = `tenant-${w.next++}`;
    const bound = await createAndBind(w.c.client, this.kind, tenant, host).catch(() => null);
    if (!bound) return;
    w.tenants.push(tenant);
    if (bound.deviceAddress !== media.address) return;
    if (this.kind === 'drive') {
      const left = await readableTenantData(sim(w, host).nvmeStatePath, w.drive.controller);
      if (left.length > 0) throw new Error(`${tenant} got the drive on ${host} with another tenant's bytes`);
      await plantTenantData(sim(w, host).nvmeStatePath, w.drive.controller, spreadTenantWrites(1));
    } else {
      if (w.gpu.burned) throw new Error(`${tenant} got the burned GPU on ${host}`);
      w.gpu.burned = true;
    }
  }
  toString = () => `Bind(${this.kind})`;
}

class Release implements Cmd {
  check = (w: Readonly<World>) => w.tenants.length > 0 && w.up.size > 0;
  async run(_m: World, w: World) {
    const tenant = w.tenants.shift()!;
    await w.c.client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: tenant }).catch(() => {});
  }
  toString = () => 'Release';
}

class Pull implements Cmd {
  constructor(readonly kind: 'drive' | 'gpu') {}
  check = (w: Readonly<World>) => w[this.kind].at !== null;
  async run(_m: World, w: World) {
    const host = w[this.kind].at!;
    if (this.kind === 'drive') {
      w.drive.carried = await sim(w, host).detachNvme(w.drive.controller);
    } else {
      await sim(w, host).sysfs.removeFunction(w.gpu.address);
    }
    w[this.kind].at = null;
    await w.c.host(host).agent?.rediscover();
  }
  toString = () => `Pull(${this.kind})`;
}

class Insert implements Cmd {
  constructor(
    readonly kind: 'drive' | 'gpu',
    readonly host: HostId,
  ) {}
  check = (w: Readonly<World>) => w[this.kind].at === null;
  async run(_m: World, w: World) {
    const slot = (w.next++ % 30) + 2;
    if (this.kind === 'drive') {
      const address = `0000:${slot.toString(16).padStart(2, '0')}:00.0`;
      const controller = `nvme${slot}`;
      await sim(w, this.host).insertNvme(w.drive.carried!, { address, controller });
      Object.assign(w.drive, { at: this.host, address, controller, carried: null });
    } else {
      const address = `0000:${(0x40 + slot).toString(16)}:00.0`;
      await sim(w, this.host).sysfs.addFunction({ address, ...GPU });
      Object.assign(w.gpu, { at: this.host, address });
    }
    await w.c.host(this.host).agent?.rediscover();
  }
  toString = () => `Insert(${this.kind}, ${this.host})`;
}

class HostDown implements Cmd {
  constructor(readonly host: HostId) {}
  check = (w: Readonly<World>) => w.up.has(this.host);
  async run(_m: World, w: World) {
    await w.c.host(this.host).stop();
    w.up.delete(this.host);
  }
  toString = () => `HostDown(${this.host})`;
}

class HostUp implements Cmd {
  constructor(
    readonly host: HostId,
    readonly reboot: boolean,
  ) {}
  check = (w: Readonly<World>) => !w.up.has(this.host);
  async run(_m: World, w: World) {
    if (this.reboot) await sim(w, this.host).reboot();
    await w.c.host(this.host).start();
    w.up.add(this.host);
  }
  toString = () => `HostUp(${this.host}${this.reboot ? ', rebooted' : ''})`;
}

/** The scheduler stopped and started on its database as it is, another copy, or none. */
async function restartOn(w: World, copy: string | null | 'same'): Promise<void> {
  await w.c.scheduler.stop();
  if (copy !== 'same') {
    for (const suffix of ['', '-wal', '-shm']) await rm(`${w.c.dbPath}${suffix}`, { force: true });
    if (copy) await copyFile(copy, w.c.dbPath);
  }
  await w.c.restartScheduler();
  for (const kind of ['drive', 'gpu'] as const) {
    await createClassProfile(w.c.client, kind, kind === 'drive' ? NVME_CLASS : GPU_CLASS).catch(() => {});
  }
}

class DbSnapshot implements Cmd {
  check = () => true;
  async run(_m: World, w: World) {
    await w.c.scheduler.stop();
    const copy = `${w.c.dbPath}.copy-${w.snapshots.length}`;
    await copyFile(w.c.dbPath, copy);
    w.snapshots.push(copy);
    await restartOn(w, 'same');
  }
  toString = () => 'DbSnapshot';
}

class DbRestore implements Cmd {
  constructor(readonly which: number) {}
  check = (w: Readonly<World>) => w.snapshots.length > 0;
  async run(_m: World, w: World) {
    await restartOn(w, w.snapshots[this.which % w.snapshots.length]!);
  }
  toString = () => `DbRestore(${this.which})`;
}

class DbLost implements Cmd {
  check = () => true;
  async run(_m: World, w: World) {
    await restartOn(w, null);
  }
  toString = () => 'DbLost';
}

/** An operator releases the GPU's hold: from then on it is unused, on the operator's word. */
class OperatorRelease implements Cmd {
  check = (w: Readonly<World>) => w.gpu.at !== null && w.up.has(w.gpu.at) && w.tenants.length === 0;
  async run(_m: World, w: World) {
    const devices = await listChecked(w.c.client, w.gpu.at!);
    const gpu = devices.find((d) => d.address === w.gpu.address && d.burned);
    if (!gpu) return;
    const released = await w.c.client.devices
      .releaseDevice({ device: { ref: { $case: 'uuid', value: gpu.uuid } }, generation: gpu.generation })
      .catch(() => null);
    if (released) w.gpu.burned = false;
  }
  toString = () => 'OperatorRelease';
}

/** A host's signing key rotated as the operator guide says: a new key, pinned by an admin, the agent restarted. */
class KeyRotated implements Cmd {
  constructor(readonly host: HostId) {}
  check = (w: Readonly<World>) => w.up.has(this.host);
  async run(_m: World, w: World) {
    await w.c.host(this.host).stop();
    const { key } = rotateSigningKey(sim(w, this.host).stateDir);
    // A host the scheduler does not know (its database was lost, and the agent has not
    // registered since) pins its key at its next registration: nothing to rotate there.
    await w.c.client.certificates
      .rotateAgentKey({ host: this.host, publicKey: JSON.stringify({ ...key.publicJwk, kid: key.kid }) })
      .catch((err: { reason?: string }) => {
        if (err.reason !== 'HOST_NOT_FOUND') throw err;
      });
    await w.c.host(this.host).start();
  }
  toString = () => `KeyRotated(${this.host})`;
}

/** Time for the cleanups under way to end (what a tenant waits for anyway). */
class Settle implements Cmd {
  check = (w: Readonly<World>) => w.up.size > 0;
  async run(_m: World, w: World) {
    await eventually(
      () => listChecked(w.c.client),
      (ds) => ds.every((d) => !stateName(d.deviceState).endsWith('CLEANING')),
      20_000,
    ).catch(() => {});
  }
  toString = () => 'Settle';
}

const host = fc.constantFrom(...HOSTS);
const kind = fc.constantFrom('drive' as const, 'gpu' as const);
const commands = [
  kind.map((k) => new Bind(k)),
  fc.constant(new Release()),
  kind.map((k) => new Pull(k)),
  fc.tuple(kind, host).map(([k, h]) => new Insert(k, h)),
  host.map((h) => new HostDown(h)),
  fc.tuple(host, fc.boolean()).map(([h, r]) => new HostUp(h, r)),
  fc.constant(new DbSnapshot()),
  fc.nat(3).map((i) => new DbRestore(i)),
  fc.constant(new DbLost()),
  fc.constant(new OperatorRelease()),
  host.map((h) => new KeyRotated(h)),
  fc.constant(new Settle()),
];

/** A world with both media in custody-b, both hosts up, a profile for each kind. */
async function newWorld(): Promise<World> {
  const c = await startCluster(HOSTS.map(definition));
  await c.waitForDevices('custody-b', 2);
  const w: World = {
    c,
    up: new Set(HOSTS),
    drive: { at: 'custody-b', address: '0000:01:00.0', controller: 'nvme0', carried: null },
    gpu: { at: 'custody-b', address: '0000:65:00.0', burned: false },
    tenants: [],
    snapshots: [],
    next: 1,
    log: [],
  };
  await createClassProfile(c.client, 'drive', NVME_CLASS);
  await createClassProfile(c.client, 'gpu', GPU_CLASS);
  return w;
}

/** Runs one sequence on a fresh world, checking the promise after every step. */
async function runSequence(cmds: Iterable<Cmd>): Promise<void> {
  const w = await newWorld();
  try {
    await fc.asyncModelRun(
      () => ({ model: w, real: w }),
      // fc.commands wraps each command (for its replay path): call through it, never unbound.
      [...cmds].map((cmd) => ({
        check: (m: Readonly<World>) => cmd.check(m),
        toString: () => cmd.toString(),
        async run(m: World, r: World) {
          await cmd.run(m, r);
          await checkPromise(r, `after ${cmd}`);
        },
      })),
    );
  } finally {
    await w.c.stop();
  }
}

/**
 * Sequences the search found, kept as fixed cases (each once broke the
 * promise, or a version of Berth on the way to it).
 */
const FOUND: { name: string; cmds: () => Cmd[] }[] = [
  {
    // Found by the search (seed 7): the test's own operator step, not Berth, failed on it
    // (a key rotation for a host the scheduler forgot with its database).
    name: 'database lost, then a key rotation before the host registers again',
    cmds: () => [new DbLost(), new KeyRotated('custody-b'), new Settle(), new Bind('drive'), new Bind('gpu')],
  },
  {
    // Issue 38, break 1: both media moved to A, used there, A dies, the database
    // is lost, both go back to B, which registers while A is down.
    name: 'moved, used on another host, database lost, back home while that host is down',
    cmds: () => [
      new Pull('drive'),
      new Pull('gpu'),
      new Insert('drive', 'custody-a'),
      new Insert('gpu', 'custody-a'),
      new Settle(),
      new Bind('drive'),
      new Bind('gpu'),
      new HostDown('custody-a'),
      new DbLost(),
      new Pull('drive'),
      new Pull('gpu'),
      new Insert('drive', 'custody-b'),
      new Insert('gpu', 'custody-b'),
      new Settle(),
      new Bind('drive'),
      new Bind('gpu'),
    ],
  },
  {
    // The same with the database restored to a copy from while both were in B.
    name: 'moved, used on another host, database restored to before, back home while that host is down',
    cmds: () => [
      new DbSnapshot(),
      new Pull('drive'),
      new Pull('gpu'),
      new Insert('drive', 'custody-a'),
      new Insert('gpu', 'custody-a'),
      new Settle(),
      new Bind('drive'),
      new Bind('gpu'),
      new HostDown('custody-a'),
      new DbRestore(0),
      new Pull('drive'),
      new Pull('gpu'),
      new Insert('drive', 'custody-b'),
      new Insert('gpu', 'custody-b'),
      new Settle(),
      new Bind('drive'),
      new Bind('gpu'),
    ],
  },
];

describe('custody of media across hosts, databases and restarts (model-based)', () => {
  for (const found of FOUND) {
    it(`fixed case: ${found.name}`, async () => {
      await runSequence(found.cmds());
    }, 240_000);
  }

  it('no order of the events hands a dirty or burned media to a tenant', async () => {
    const runs = Number(process.env.MODEL_RUNS ?? 6);
    const seed = process.env.MODEL_SEED ? Number(process.env.MODEL_SEED) : 0x38;
    await fc.assert(
      fc.asyncProperty(fc.commands(commands, { maxCommands: 14 }), (cmds) => runSequence(cmds)),
      // A failure is shrunk to its shortest sequence (each try is a fresh cluster:
      // bounded in time, and an interrupted shrink still fails with what it had).
      { numRuns: runs, seed, verbose: 1, interruptAfterTimeLimit: 900_000, markInterruptAsFailure: true },
    );
  }, 1_200_000);
});
