/**
 * Custody in the scheduler's pure media rules (DESIGN invariant 15, decision
 * 62): a media a host presents after another host did is of unknown history;
 * a host joining while another still presents it (a dual-port drive) is not a
 * break; two media claiming one key are both held; an agent's report of a
 * custody break is dirt (or a burn) with its reason.
 */
import { describe, expect, it } from 'vitest';
import type { DeviceRecord } from './device-state.js';
import { newDevice } from './device-state.js';
import { facts, hostName, nvmeMedia, pciFacts, testUuid } from './fixtures.support.js';
import {
  firstSight,
  identityDifference,
  type MediaState,
  mediaReported,
  mediaUnburned,
  settleMedia,
} from './media.js';

const NOW = '2026-01-01T00:00:00.000Z';
const NQN = 'nqn.test:SER-A';

const drive = (host: string, index: number, over: Partial<DeviceRecord> = {}): DeviceRecord => ({
  ...newDevice(hostName(host), facts({ index, ...nvmeMedia(NQN) }), testUuid(`${host}-${index}`), NOW),
  mediaReason: '',
  ...over,
});
const gpuMedia = { ...nvmeMedia('x').media!, key: 'pci-dsn:10de:aa:00.0', kind: 'PCI_DSN' as const };
const gpu = (host: string, index: number, over: Partial<DeviceRecord> = {}): DeviceRecord => ({
  ...newDevice(
    hostName(host),
    pciFacts({ index, oneTimeUse: true, media: gpuMedia }),
    testUuid(`g-${host}`),
    NOW,
  ),
  mediaReason: '',
  ...over,
});
const settled = (m: MediaState, devices: DeviceRecord[]) => settleMedia(m, devices, NOW);

describe('custody in settleMedia', () => {
  it('a host that presents a media none of its last custodians still presents makes it unknown: dirty (cleaned first)', () => {
    const m0 = settled({ ...firstSight(drive('a', 0), null, NOW), condition: 'clean', reason: '' }, [
      drive('a', 0),
    ]).media;
    expect(m0.custodians).toEqual(['a']);
    // It left a (not present there any more): the record keeps a as its last custodian.
    const gone = settled(m0, [drive('a', 0, { present: false })]).media;
    expect([gone.condition, gone.custodians]).toEqual(['clean', ['a']]);
    const s = settled(gone, [drive('a', 0, { present: false }), drive('b', 1)]);
    expect(s.media).toMatchObject({ condition: 'dirty', custodians: ['b'] });
    expect(s.media.reason).toContain('custody changed: b reports it after a did');
    expect(s.toClean?.host).toBe('b');
    // Back at a, where it was last before b: b reported it since, so it is unknown again.
    const cleanAtB = { ...s.media, condition: 'clean' as const, reason: '' };
    const back = settled(cleanAtB, [drive('a', 0), drive('b', 1, { present: false })]);
    expect(back.media).toMatchObject({ condition: 'dirty', custodians: ['a'] });
  });

  it('a host joining while another still presents it (a dual-port drive, the same identity) is not a break', () => {
    const m0 = settled({ ...firstSight(drive('a', 0), null, NOW), condition: 'clean', reason: '' }, [
      drive('a', 0),
    ]).media;
    const s = settled(m0, [drive('a', 0), drive('b', 1)]);
    expect(s.media).toMatchObject({ condition: 'clean', custodians: ['a', 'b'] });
    expect(s.devices).toEqual([]);
    // a leaves; b, which presented it all along, keeps custody.
    expect(settled(s.media, [drive('a', 0, { present: false }), drive('b', 1)]).media.condition).toBe(
      'clean',
    );
  });

  it('a one-time-use media that changed hands is held for an operator with the reason; the release clears it', () => {
    const m0 = settled(firstSight(gpu('a', 0), null, NOW), [gpu('a', 0)]).media;
    const s = settled(m0, [gpu('a', 0, { present: false }), gpu('b', 1)]);
    expect(s.media.burned).toBe(true);
    expect(s.media.burnReason).toContain('custody changed');
    const atB = s.devices.find((d) => d.host === 'b')!;
    expect(atB.burned).toBe(true);
    expect(atB.mediaReason).toContain("held for an operator's release");
    const released = mediaUnburned(s.media, NOW);
    expect([released.burned, released.burnReason]).toEqual([false, '']);
    expect(settled(released, [gpu('a', 0, { present: false }), gpu('b', 1)]).media.burned).toBe(false);
  });

  it('two media claiming one key at once (a cloned NQN): both held with a reason naming both, never cleaned; the one left is cleaned', () => {
    const m0 = settled({ ...firstSight(drive('a', 0), null, NOW), condition: 'clean', reason: '' }, [
      drive('a', 0),
    ]).media;
    const other = drive('b', 1);
    other.media = { ...other.media!, serial: 'SER-Z' };
    const s = settled(m0, [drive('a', 0), other]);
    expect(s.toClean).toBeNull();
    expect(s.devices.map((d) => d.mediaReason)).toEqual([expect.any(String), expect.any(String)]);
    for (const d of s.devices) {
      expect(d.mediaReason).toContain('two different media claim key nvme:nqn.test:SER-A');
      expect(d.mediaReason).toContain('a 0000:10:00.0 and b 0000:11:00.0 differ in serial SER-A and SER-Z');
    }
    expect(s.media.condition).toBe('dirty');
    // b's is pulled: a's is of unknown history now, and cleaned.
    const after = settled(s.media, [drive('a', 0), { ...other, present: false }]);
    expect(after.toClean?.host).toBe('a');
  });

  it('identityDifference: serial, model and a namespace identifier both report; an identifier one side lacks is no difference', () => {
    const a = nvmeMedia(NQN).media!;
    expect(identityDifference(a, { ...a })).toBe('');
    expect(identityDifference(a, { ...a, model: 'other' })).toContain('model');
    const withNguid = (nguid: string) => ({ ...a, namespaces: [{ nsid: 1, nguid, eui64: '', uuid: '' }] });
    expect(identityDifference(withNguid('aa'), withNguid(''))).toBe('');
    expect(identityDifference(withNguid('aa'), withNguid('bb'))).toBe("namespace 1's nguid aa and bb");
    expect(identityDifference(withNguid('aa'), withNguid('bb'), false)).toBe('');
    // Namespaces one controller does not see (dual-port drives attach them per controller) are no difference.
    expect(identityDifference(a, { ...a, namespaces: [] })).toBe('');
  });
});

describe("an agent's report of a custody break", () => {
  it('is dirt newer than the last accepted cleanup, and a burn with its reason', () => {
    const m: MediaState = {
      ...firstSight(drive('b', 0), null, NOW),
      condition: 'clean',
      reason: '',
      cleanedAt: 1_000,
    };
    const why = 'its custody broke at 1970-01-01T00:00:02.000Z (a discovery no longer saw it)';
    const dirty = mediaReported(
      m,
      { ...nvmeMedia(NQN, { condition: 'dirty', since: 3_000, reason: why }).agentMedia! },
      'b',
      NOW,
    );
    expect(dirty.condition).toBe('dirty');
    expect(dirty.reason).toContain(why);
    const burned = mediaReported(
      m,
      {
        ...nvmeMedia(NQN, { condition: 'not_cleanable', burned: true, since: 3_000, reason: why })
          .agentMedia!,
      },
      'b',
      NOW,
    );
    expect([burned.burned, burned.burnReason]).toEqual([true, `the agent of host b: ${why}`]);
  });
});
