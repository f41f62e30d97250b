/**
 * A device between its wire form and its one record (device-proto.ts), and on
 * into the scheduler's facts and its own Device message (scheduler/convert.ts).
 * The device below sets every field of every message to a value that is not
 * its default, and not the value a mapper falls back to: a field a mapper
 * drops, or maps to its fallback, changes the round trip and fails it; a field
 * added to the proto and left out here fails the first test.
 */
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it } from 'vitest';
import {
  Device,
  DeviceType,
  FunctionKind,
  Health,
  MediaCondition,
  MediaIdentity,
  MediaIdentityKind,
  MediaRecord,
  NamespaceIdentity,
  WriteCounters,
} from '../gen/berth/agent/v1/device.js';
import type { DiscoveredDevice } from '../plugins/types.js';
import { deviceFromProto, deviceToProto } from './device-proto.js';
import { factsFromAgent, deviceToProto as schedulerDeviceToProto } from './scheduler/convert.js';
import { newDevice } from './scheduler/domain/device-state.js';
import { hostName, testUuid } from './scheduler/domain/fixtures.support.js';

const NQN = 'nqn.2014-08.org.nvmexpress:uuid:7d3e0a52-8d3c-4b6f-9a51-2f1d0c9e4b17';

const FULL: Device = {
  address: '0000:3b:00.3',
  vendorId: '144d',
  productId: 'a824',
  classCode: '010802',
  kernelDriver: 'vfio-pci',
  driver: 'nvme',
  type: DeviceType.DEVICE_TYPE_NVME,
  functionKind: FunctionKind.FUNCTION_KIND_VF,
  physfn: '0000:3b:00.0',
  iommuGroup: 42,
  iommuGroupPeers: ['0000:3b:00.4'],
  numaNode: 1,
  resourceClass: 'CUSTOM_NVME_PM1733',
  traits: ['CUSTOM_FAST', 'HW_ONE_TIME_USE'],
  managed: true,
  liveMigratable: true,
  oneTimeUse: true,
  supportsCleaning: true,
  cleanupAction: 'sanitize-crypto',
  health: Health.HEALTH_UNHEALTHY,
  healthReason: 'SMART critical warning 0x04',
  unallocatableReason: 'its IOMMU group holds 0000:3b:00.5, which no driver manages',
  attributes: { model: 'SAMSUNG MZWLJ3T8HBLS', nvme_controller: 'nvme3' },
  media: {
    key: `nvme:${NQN}`,
    kind: MediaIdentityKind.MEDIA_IDENTITY_KIND_NVME_SUBSYSTEM,
    subsystemNqn: NQN,
    serial: 'S4Y1NA0R100231',
    model: 'SAMSUNG MZWLJ3T8HBLS',
    namespaces: [
      {
        nsid: 1,
        nguid: '0025385391b00a34',
        eui64: '0025385391b00a35',
        uuid: 'a1b2c3d4-0000-4000-8000-00000000000a',
      },
    ],
    deviceSerialNumber: '01-23-45-67-89-ab-cd-ef',
  },
  mediaRecord: {
    key: `nvme:${NQN}`,
    condition: MediaCondition.MEDIA_CONDITION_HELD,
    burned: true,
    since: new Date('2026-03-04T05:06:07.089Z'),
    lastAddress: '0000:3b:00.2',
    arqUuid: '5b0e7c3a-1d2f-4e6a-8b9c-0d1e2f3a4b5c',
    instanceUuid: '6c1f8d4b-2e3a-4f7b-9cad-1e2f3a4b5c6d',
    reason: 'one-time-use media seen with no record',
    writeCounters: {
      controller: 'nvme3',
      cntlid: 7,
      dataUnitsWritten: '340282366920938463463374607431768211455',
      hostWriteCommands: '912',
      powerCycles: '31',
      powerOnHours: '1204',
      readAt: new Date('2026-03-04T05:06:08.001Z'),
    },
  },
};

/** The fields of `value` left at their default (as `base`, the message's empty value, holds them). */
function unset(value: object, base: object): string[] {
  const v = value as Record<string, unknown>;
  return Object.entries(base)
    .filter(([k, d]) => {
      const x = v[k];
      if (Array.isArray(x) && x.length === 0) return true;
      if (x !== null && typeof x === 'object' && !(x instanceof Date) && Object.keys(x).length === 0)
        return true;
      return isDeepStrictEqual(x, d);
    })
    .map(([k]) => k);
}

const onTheWire = (d: Device): Device => Device.decode(Device.encode(d).finish());

describe('a device on the agent wire', () => {
  it('is written with every field of every message set', () => {
    expect({
      Device: unset(FULL, Device.fromPartial({})),
      MediaIdentity: unset(FULL.media!, MediaIdentity.fromPartial({})),
      NamespaceIdentity: unset(FULL.media!.namespaces[0]!, NamespaceIdentity.fromPartial({})),
      MediaRecord: unset(FULL.mediaRecord!, MediaRecord.fromPartial({})),
      WriteCounters: unset(FULL.mediaRecord!.writeCounters!, WriteCounters.fromPartial({})),
    }).toEqual({ Device: [], MediaIdentity: [], NamespaceIdentity: [], MediaRecord: [], WriteCounters: [] });
  });

  it('comes back the same through the record: proto → record → proto', () => {
    const sent = onTheWire(FULL);
    expect(deviceToProto(deviceFromProto(sent))).toStrictEqual(sent);
    expect(onTheWire(deviceToProto(deviceFromProto(sent)))).toStrictEqual(sent);
  });

  it.each([
    [DeviceType.DEVICE_TYPE_PCI, FunctionKind.FUNCTION_KIND_PCI, Health.HEALTH_HEALTHY],
    [DeviceType.DEVICE_TYPE_PCI, FunctionKind.FUNCTION_KIND_PF, Health.HEALTH_HEALTHY],
    [DeviceType.DEVICE_TYPE_NVME, FunctionKind.FUNCTION_KIND_VF, Health.HEALTH_UNHEALTHY],
  ])('keeps type %i, function kind %i and health %i', (type, functionKind, health) => {
    const sent = onTheWire({ ...FULL, type, functionKind, health });
    expect(deviceToProto(deviceFromProto(sent))).toStrictEqual(sent);
  });

  it('reads what it leaves empty as null, and sends null back as empty', () => {
    const sent = onTheWire({
      ...FULL,
      kernelDriver: '',
      physfn: '',
      iommuGroup: undefined,
      cleanupAction: '',
      media: undefined,
      mediaRecord: undefined,
    });
    const record = deviceFromProto(sent);
    expect(record).toMatchObject({ kernelDriver: null, physfn: null, iommuGroup: null, cleanupAction: null });
    expect('media' in record || 'mediaRecord' in record).toBe(false);
    expect(deviceToProto(record)).toStrictEqual(sent);
  });

  it('keeps on the host what only the agent reads', () => {
    const record = deviceFromProto(onTheWire(FULL));
    const discovered: DiscoveredDevice = {
      ...record,
      assumeClean: true,
      writeCounters: { ...record.mediaRecord!.writeCounters!, at: 1 },
    };
    const sent = deviceToProto(discovered);
    expect(Object.keys(sent).sort()).toEqual(Object.keys(Device.fromPartial({})).sort());
    expect(deviceFromProto(sent)).toStrictEqual(record);
  });
});

describe("a device in the scheduler's facts and API", () => {
  it('keeps every field of the record in its facts', () => {
    const record = deviceFromProto(onTheWire(FULL));
    const { address, media, agentMedia, ...rest } = factsFromAgent(onTheWire(FULL), 'devices[0]');
    expect({
      ...rest,
      address,
      media: media ?? undefined,
      mediaRecord: agentMedia ?? undefined,
    }).toStrictEqual(record);
  });

  it("shows every fact its Device message names as the agent sent it (the reason is the scheduler's own)", () => {
    const facts = factsFromAgent(onTheWire(FULL), 'devices[0]');
    const shown = schedulerDeviceToProto(
      newDevice(hostName('h1'), facts, testUuid('d1'), '2026-01-01T00:00:00.000Z'),
    );
    const shared = Object.keys(shown).filter((k) => k in FULL && k !== 'unallocatableReason');
    expect(shared.length).toBeGreaterThan(20);
    for (const k of shared) {
      expect.soft(shown[k as keyof typeof shown], k).toStrictEqual(FULL[k as keyof Device]);
    }
    expect(shown.unallocatableReason).toContain(FULL.unallocatableReason);
  });

  it('refuses an address that is not a PCI address, naming the field', () => {
    expect(() => factsFromAgent({ ...FULL, address: '3b:00.3' }, 'devices[4]')).toThrow(
      /devices\[4\]\.address/,
    );
  });
});
