import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BerthError } from '../../../errors.js';
import { pickDevice } from './allocation.js';
import {
  agentRestarted,
  allocatable,
  bind,
  cleanupFailed,
  cleanupImpossible,
  cleanupInterrupted,
  cleanupStarted,
  cleanupSucceeded,
  type DeviceFacts,
  type DeviceRecord,
  expectedReserved,
  healthChanged,
  inUse,
  newDevice,
  operatorClean,
  operatorRelease,
  rediscovered,
  release,
  setStatus,
  vanished,
} from './device-state.js';
import { facts, hostName, PROOF, pciFacts, testUuid } from './fixtures.support.js';
import type { RequestGroup } from './profile.js';

const NOW = '2026-01-01T00:00:00.000Z';
const dev = (f: DeviceFacts = facts(), uuid = 'd1') => newDevice(hostName('h1'), f, testUuid(uuid), NOW);

function reasonOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(BerthError);
    return (e as BerthError).reason;
  }
  return undefined;
}

describe('device state machine: single events', () => {
  it('a new healthy device is available with reserved 0, and the rp is named host_address', () => {
    const d = dev();
    expect(d.deviceState).toBe('available');
    expect(d.reserved).toBe(0);
    expect(d.total).toBe(1);
    expect(d.resourceProvider).toBe('h1_0000:10:00.0');
    expect(allocatable(d)).toBe(true);
  });

  it('an agent reason, ill health or maintaining makes a device reserved', () => {
    expect(dev(facts({ unallocatableReason: 'IOMMU group shared' })).reserved).toBe(1);
    expect(dev(facts({ health: 'unhealthy', healthReason: 'no driver' })).reserved).toBe(1);
    expect(setStatus(dev(), 'maintaining').reserved).toBe(1);
    expect(setStatus(setStatus(dev(), 'maintaining'), 'enabled').reserved).toBe(0);
  });

  it('bind reserves; release of a cleaning-capable device goes pending_cleaning, cleaning, available', () => {
    const b = bind(dev(), { arqUuid: 'a1', instanceUuid: 'i1' });
    expect([b.deviceState, b.reserved, b.arqUuid]).toEqual(['allocated', 1, 'a1']);
    const r = release(b, { arqUuid: 'a1' }, 'job1');
    expect([r.deviceState, r.reserved, r.cleanupJobId]).toEqual(['pending_cleaning', 1, 'job1']);
    const s = cleanupStarted(r, 'job1', NOW);
    expect(s.deviceState).toBe('cleaning');
    expect(cleanupStarted(s, 'job1', NOW)).toBe(s);
    const ok = cleanupSucceeded(s, 'job1', 'sanitize-crypto', NOW, PROOF);
    expect([ok.deviceState, ok.reserved, ok.lastCleanup?.outcome]).toEqual(['available', 0, 'succeeded']);
  });

  it('a success without a proof of erasure (an old agent, or one that omits it) is an error, not available', () => {
    const s = cleanupStarted(
      release(bind(dev(), { arqUuid: 'a', instanceUuid: 'i' }), { arqUuid: 'a' }, 'j'),
      'j',
      NOW,
    );
    for (const proof of [null, { ...PROOF, method: '' }]) {
      const bad = cleanupSucceeded(s, 'j', 'sanitize-crypto', NOW, proof);
      expect([bad.deviceState, bad.reserved, bad.lastCleanup?.outcome]).toEqual(['error', 1, 'failed']);
      expect(bad.errorReason).toContain('without a proof of erasure');
    }
  });

  it("a success keeps the agent's proof as the device's last cleanup", () => {
    const s = cleanupStarted(
      release(bind(dev(), { arqUuid: 'a', instanceUuid: 'i' }), { arqUuid: 'a' }, 'j'),
      'j',
      NOW,
    );
    const proof = {
      method: 'read-back',
      readBack: 'full' as const,
      bytesWritten: 4096,
      bytesRead: 4096,
      bytesTotal: 4096,
      findings: ['nvme0n1: all 4096 bytes read back as zero'],
    };
    const ok = cleanupSucceeded(s, 'j', 'sanitize-crypto', NOW, proof);
    expect(ok.lastCleanup).toMatchObject({ outcome: 'succeeded', proof, message: proof.findings[0] });
    // The next cleanup's start clears it: a running job has proven nothing yet.
    const next = cleanupStarted(
      release(bind(ok, { arqUuid: 'b', instanceUuid: 'i' }), { arqUuid: 'b' }, 'k'),
      'k',
      NOW,
    );
    expect(next.lastCleanup?.proof ?? null).toBeNull();
  });

  it('a success claimed for another action than the locked-in one is an error, not available', () => {
    const s = cleanupStarted(
      release(bind(dev(), { arqUuid: 'a', instanceUuid: 'i' }), { arqUuid: 'a' }, 'j'),
      'j',
      NOW,
    );
    const bad = cleanupSucceeded(s, 'j', 'shred', NOW, PROOF);
    expect(bad.deviceState).toBe('error');
    expect(bad.errorReason).toContain('"shred"');
  });

  it('events of a stale job are refused', () => {
    const p = release(bind(dev(), { arqUuid: 'a', instanceUuid: 'i' }), { arqUuid: 'a' }, 'j2');
    expect(reasonOf(() => cleanupSucceeded(p, 'j1', 'sanitize-crypto', NOW, PROOF))).toBe(
      'STALE_CLEANUP_JOB',
    );
    expect(reasonOf(() => cleanupStarted(dev(), 'j1', NOW))).toBe('CLEANUP_NOT_EXPECTED');
  });

  it('a device without cleaning goes back to available on release; a one-time-use one stays burned', () => {
    const plain = release(bind(dev(pciFacts()), { arqUuid: 'a', instanceUuid: 'i' }), { arqUuid: 'a' }, 'j');
    expect([plain.deviceState, plain.reserved]).toEqual(['available', 0]);
    const otu = bind(dev(pciFacts({ oneTimeUse: true })), { arqUuid: 'a', instanceUuid: 'i' });
    expect(otu.burned).toBe(true);
    const after = release(otu, { arqUuid: 'a' }, 'j');
    expect([after.deviceState, after.burned, after.reserved]).toEqual(['available', true, 1]);
    expect(reasonOf(() => bind(after, { arqUuid: 'b', instanceUuid: 'i2' }))).toBe('DEVICE_NOT_ALLOCATABLE');
    const freed = operatorRelease(after);
    expect([freed.burned, freed.reserved]).toEqual([false, 0]);
    expect(operatorRelease(freed)).toBe(freed);
  });

  it('release refuses an ARQ that does not hold the device', () => {
    const b = bind(dev(), { arqUuid: 'a1', instanceUuid: 'i1' });
    expect(reasonOf(() => release(b, { arqUuid: 'a2' }, 'j'))).toBe('DEVICE_NOT_HELD');
    expect(reasonOf(() => release(dev(), { arqUuid: 'a1' }, 'j'))).toBe('DEVICE_NOT_HELD');
  });

  it('CleanDevice follows the spec table', () => {
    const d = dev();
    expect(reasonOf(() => operatorClean(dev(pciFacts()), 'j', true))).toBe('CLEANING_NOT_SUPPORTED');
    expect(reasonOf(() => operatorClean(d, 'j', false))).toBe('AGENT_CANNOT_CLEAN');
    expect(reasonOf(() => operatorClean(d, 'j', true))).toBe('DEVICE_ALREADY_CLEAN');
    const b = bind(d, { arqUuid: 'a', instanceUuid: 'i' });
    expect(reasonOf(() => operatorClean(b, 'j', true))).toBe('DEVICE_ALLOCATED');
    const p = release(b, { arqUuid: 'a' }, 'j1');
    expect(reasonOf(() => operatorClean(p, 'j', true))).toBe('CLEANUP_IN_PROGRESS');
    const e = cleanupFailed(cleanupStarted(p, 'j1', NOW), 'j1', 'sanitize failed', NOW);
    expect(e.deviceState).toBe('error');
    const again = operatorClean(e, 'j2', true);
    expect([again.deviceState, again.cleanupJobId, again.errorReason]).toEqual([
      'pending_cleaning',
      'j2',
      '',
    ]);
  });

  it('agent restart: cleaning → error, pending_cleaning stays for re-dispatch', () => {
    const p = release(bind(dev(), { arqUuid: 'a', instanceUuid: 'i' }), { arqUuid: 'a' }, 'j');
    expect(agentRestarted(p, NOW)).toBe(p);
    const e = agentRestarted(cleanupStarted(p, 'j', NOW), NOW);
    expect([e.deviceState, e.lastCleanup?.outcome]).toEqual(['error', 'interrupted']);
  });

  it('rediscovery may change the cleanup action only while available or error (invariant 6)', () => {
    const changed = facts({ cleanupAction: 'write-zeroes' });
    expect(rediscovered(dev(), changed).cleanupAction).toBe('write-zeroes');
    const b = bind(dev(), { arqUuid: 'a', instanceUuid: 'i' });
    expect(rediscovered(b, changed).cleanupAction).toBe('sanitize-crypto');
    expect(rediscovered(b, facts({ supportsCleaning: false, cleanupAction: null })).supportsCleaning).toBe(
      true,
    );
  });

  it('a device marked one-time-use while allocated is burned at rediscovery', () => {
    const b = bind(dev(pciFacts()), { arqUuid: 'a', instanceUuid: 'i' });
    expect(b.burned).toBe(false);
    expect(rediscovered(b, pciFacts({ oneTimeUse: true })).burned).toBe(true);
  });

  it('a vanished device is unhealthy and reserved, and healthy again when it returns', () => {
    const v = vanished(dev(), 'not found by discovery');
    expect([v.present, v.health, v.reserved]).toEqual([false, 'unhealthy', 1]);
    expect(rediscovered(v, facts()).reserved).toBe(0);
  });
});

// ---------------------------------------------------------------------------
// Property test: random sequences of events on a small fleet.

type Op =
  | { kind: 'bindPick'; arq: number; group: number }
  | { kind: 'bindDirect'; dev: number; arq: number }
  | { kind: 'releaseArq'; arq: number }
  | { kind: 'releaseWrong'; dev: number; arq: number }
  | { kind: 'started' | 'failed' | 'interrupted' | 'impossible'; dev: number; stale: boolean }
  | { kind: 'succeeded'; dev: number; stale: boolean; wrongAction: boolean; noProof: boolean }
  | { kind: 'agentRestart' }
  | { kind: 'operatorClean'; dev: number; agentCanClean: boolean }
  | { kind: 'operatorRelease'; dev: number }
  | { kind: 'status'; dev: number; maintaining: boolean }
  | { kind: 'health'; dev: number; healthy: boolean }
  | { kind: 'rediscover'; dev: number; action: string | null; oneTimeUse: boolean }
  | { kind: 'vanish'; dev: number };

const FLEET = 6;
const dIdx = fc.integer({ min: 0, max: FLEET - 1 });
const aIdx = fc.integer({ min: 0, max: 3 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({ kind: fc.constant('bindPick' as const), arq: aIdx, group: fc.nat(2) }),
  },
  fc.record({ kind: fc.constant('bindDirect' as const), dev: dIdx, arq: aIdx }),
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('releaseArq' as const), arq: aIdx }) },
  fc.record({ kind: fc.constant('releaseWrong' as const), dev: dIdx, arq: aIdx }),
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constantFrom(
        'started' as const,
        'failed' as const,
        'interrupted' as const,
        'impossible' as const,
      ),
      dev: dIdx,
      stale: fc.boolean(),
    }),
  },
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('succeeded' as const),
      dev: dIdx,
      stale: fc.boolean(),
      wrongAction: fc.boolean(),
      noProof: fc.boolean(),
    }),
  },
  fc.record({ kind: fc.constant('agentRestart' as const) }),
  fc.record({ kind: fc.constant('operatorClean' as const), dev: dIdx, agentCanClean: fc.boolean() }),
  fc.record({ kind: fc.constant('operatorRelease' as const), dev: dIdx }),
  fc.record({ kind: fc.constant('status' as const), dev: dIdx, maintaining: fc.boolean() }),
  fc.record({ kind: fc.constant('health' as const), dev: dIdx, healthy: fc.boolean() }),
  fc.record({
    kind: fc.constant('rediscover' as const),
    dev: dIdx,
    action: fc.constantFrom(null, 'sanitize-crypto', 'write-zeroes'),
    oneTimeUse: fc.boolean(),
  }),
  fc.record({ kind: fc.constant('vanish' as const), dev: dIdx }),
);

/** Fleet: NVMe (cleaned) and PCI devices, some one-time-use, two sharing an IOMMU group. */
function fleetFacts(): DeviceFacts[] {
  return [
    facts({ index: 0 }),
    facts({ index: 1, oneTimeUse: true }),
    facts({ index: 2, iommuGroup: 7 }),
    pciFacts({ index: 3, iommuGroup: 7 }),
    pciFacts({ index: 4, oneTimeUse: true }),
    pciFacts({ index: 5, liveMigratable: true }),
  ];
}

const GROUPS: RequestGroup[] = [
  {
    resourceClass: 'CUSTOM_NVME_144D_A808',
    vendorId: '',
    productId: '',
    requiredTraits: [],
    forbiddenTraits: [],
    liveMigratable: 'unset',
    count: 1,
  },
  {
    resourceClass: 'CUSTOM_PCI_10DE_25B6',
    vendorId: '',
    productId: '',
    requiredTraits: [],
    forbiddenTraits: [],
    liveMigratable: 'unset',
    count: 1,
  },
  {
    resourceClass: '',
    vendorId: '10de',
    productId: '25b6',
    requiredTraits: [],
    forbiddenTraits: [],
    liveMigratable: 'yes',
    count: 1,
  },
];

interface World {
  devices: DeviceRecord[];
  /** Test-side truth: a cleaning-capable device was used and not cleaned since. */
  dirty: boolean[];
  jobSeq: number;
}

const UNLOCKED = new Set(['available', 'error']);

function step(w: World, op: Op): void {
  const before = w.devices.map((d) => d);
  let changedIndex = -1;
  let opName: string = op.kind;
  const apply = (i: number, fn: (d: DeviceRecord) => DeviceRecord) => {
    changedIndex = i;
    try {
      w.devices[i] = fn(w.devices[i]!);
    } catch (e) {
      if (!(e instanceof BerthError) || e.code !== 'FAILED_PRECONDITION') throw e;
    }
  };
  const jobOf = (d: DeviceRecord, stale: boolean) =>
    stale ? `stale-${w.jobSeq}` : (d.cleanupJobId ?? 'none');
  const arqHolder = (arq: number) => w.devices.findIndex((d) => d.arqUuid === `arq${arq}`);

  switch (op.kind) {
    case 'bindPick': {
      if (arqHolder(op.arq) >= 0) break; // the store refuses a second bind of a bound ARQ
      const busy = new Set(
        w.devices.filter(inUse).flatMap((d) => (d.iommuGroup === null ? [] : [d.iommuGroup])),
      );
      const pick = pickDevice(GROUPS[op.group]!, w.devices, { busyIommuGroups: busy });
      if (pick.device === null) break;
      const i = w.devices.indexOf(pick.device);
      expect(allocatable(pick.device)).toBe(true);
      apply(i, (d) => bind(d, { arqUuid: `arq${op.arq}`, instanceUuid: 'inst' }));
      expect(w.devices[i]!.deviceState).toBe('allocated');
      break;
    }
    case 'bindDirect': {
      if (arqHolder(op.arq) >= 0) break;
      const wasAllocatable = allocatable(w.devices[op.dev]!);
      apply(op.dev, (d) => bind(d, { arqUuid: `arq${op.arq}`, instanceUuid: 'inst' }));
      // invariant 5: bind succeeds exactly when the device was allocatable
      expect(w.devices[op.dev]!.deviceState === 'allocated' && w.devices[op.dev] !== before[op.dev]).toBe(
        wasAllocatable,
      );
      break;
    }
    case 'releaseArq': {
      const i = arqHolder(op.arq);
      if (i < 0) break;
      apply(i, (d) => release(d, { arqUuid: `arq${op.arq}` }, `job${++w.jobSeq}`));
      break;
    }
    case 'releaseWrong':
      apply(op.dev, (d) => release(d, { arqUuid: `other${op.arq}` }, `job${++w.jobSeq}`));
      expect(w.devices[op.dev]).toBe(before[op.dev]);
      break;
    case 'started':
      apply(op.dev, (d) => cleanupStarted(d, jobOf(d, op.stale), NOW));
      break;
    case 'failed':
      apply(op.dev, (d) => cleanupFailed(d, jobOf(d, op.stale), 'boom', NOW));
      break;
    case 'interrupted':
      apply(op.dev, (d) => cleanupInterrupted(d, jobOf(d, op.stale), 'lost', NOW));
      break;
    case 'impossible':
      apply(op.dev, (d) => cleanupImpossible(d, jobOf(d, op.stale), 'agent cannot clean', NOW));
      break;
    case 'succeeded': {
      const locked = w.devices[op.dev]!.cleanupAction ?? '';
      apply(op.dev, (d) =>
        cleanupSucceeded(
          d,
          jobOf(d, op.stale),
          op.wrongAction ? 'other' : locked,
          NOW,
          op.noProof ? null : PROOF,
        ),
      );
      const d = w.devices[op.dev]!;
      if (d.deviceState === 'available' && before[op.dev]!.deviceState !== 'available') {
        // the only way back to available after a use: the current job, the locked action
        expect(op.stale || op.wrongAction || op.noProof).toBe(false);
        w.dirty[op.dev] = false;
        opName = 'cleanSuccess';
      }
      break;
    }
    case 'agentRestart':
      w.devices = w.devices.map((d) => agentRestarted(d, NOW));
      break;
    case 'operatorClean':
      apply(op.dev, (d) => operatorClean(d, `job${++w.jobSeq}`, op.agentCanClean));
      break;
    case 'operatorRelease':
      apply(op.dev, operatorRelease);
      break;
    case 'status':
      apply(op.dev, (d) => setStatus(d, op.maintaining ? 'maintaining' : 'enabled'));
      break;
    case 'health':
      apply(op.dev, (d) => healthChanged(d, op.healthy ? 'healthy' : 'unhealthy', 'flap'));
      break;
    case 'rediscover': {
      const f = fleetFacts()[op.dev]!;
      apply(op.dev, (d) =>
        rediscovered(d, {
          ...f,
          oneTimeUse: op.oneTimeUse,
          cleanupAction: f.supportsCleaning ? op.action : null,
          supportsCleaning: f.supportsCleaning && op.action !== null,
        }),
      );
      break;
    }
    case 'vanish':
      apply(op.dev, (d) => vanished(d, 'gone'));
      break;
  }

  // Bookkeeping: a bind of a cleaning-capable device makes it dirty.
  w.devices.forEach((d, i) => {
    const b = before[i]!;
    if (d.deviceState === 'allocated' && b.deviceState !== 'allocated' && d.supportsCleaning)
      w.dirty[i] = true;
  });
  checkInvariants(w, before, opName, changedIndex);
}

function checkInvariants(w: World, before: DeviceRecord[], opName: string, changed: number): void {
  const arqs = new Set<string>();
  w.devices.forEach((d, i) => {
    const b = before[i]!;
    // 1. reserved = total exactly when not allocatable
    expect(d.reserved).toBe(expectedReserved(d));
    expect(d.reserved === d.total).toBe(!allocatable(d));
    // 2. a used cleaning-capable device is available only after its cleanup succeeded
    if (w.dirty[i]) expect(d.deviceState === 'available', `device ${i} available while dirty`).toBe(false);
    if (d.deviceState === 'available' && b.deviceState !== 'available' && b.supportsCleaning) {
      expect(['cleanSuccess', 'releaseArq']).toContain(opName);
      if (opName === 'releaseArq') expect(b.deviceState).toBe('allocated');
    }
    // 5. one ARQ per device, one device per ARQ, allocated ⇔ held
    if (d.arqUuid !== null) {
      expect(arqs.has(d.arqUuid)).toBe(false);
      arqs.add(d.arqUuid);
    }
    expect(d.deviceState === 'allocated').toBe(d.arqUuid !== null);
    // 8. burned on bind of a one-time-use device; only operatorRelease un-burns
    if (d.deviceState === 'allocated' && b.deviceState !== 'allocated' && d.oneTimeUse)
      expect(d.burned).toBe(true);
    if (b.burned && !d.burned) {
      expect(opName).toBe('operatorRelease');
      expect(i).toBe(changed);
    }
    // 6. cleanup action locked outside available/error
    if (d.cleanupAction !== b.cleanupAction || d.supportsCleaning !== b.supportsCleaning) {
      expect(UNLOCKED.has(b.deviceState)).toBe(true);
    }
    // 3. an agent restart: a running job is lost (error), a dispatched one stays to be retried
    if (opName === 'agentRestart') {
      if (b.deviceState === 'cleaning') expect(d.deviceState).toBe('error');
      else expect(d).toBe(b);
    }
    // cleaning states always name their job
    if (d.deviceState === 'pending_cleaning' || d.deviceState === 'cleaning')
      expect(d.cleanupJobId).not.toBeNull();
  });
  // no two in-use devices share an IOMMU group (only binds through the picker can reach here
  // for grouped devices, except bindDirect which deliberately bypasses the picker)
}

describe('device state machine: random event sequences keep the invariants', () => {
  it('holds invariants 1, 2, 3, 5, 6, 8 after every step', () => {
    fc.assert(
      fc.property(fc.array(opArb, { minLength: 20, maxLength: 100, size: 'max' }), (ops) => {
        const w: World = {
          devices: fleetFacts().map((f, i) => newDevice(hostName('h1'), f, testUuid(`dev${i}`), NOW)),
          dirty: new Array(FLEET).fill(false),
          jobSeq: 0,
        };
        for (const op of ops) step(w, op);
      }),
      { numRuns: 120 },
    );
  });
});
