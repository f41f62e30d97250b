import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  resourceSliceSpec,
  resourceSliceValidator,
  sliceProblems,
} from '../../../../test/helpers/kube-apiserver.js';
import type { DiscoveredDevice, MediaRecord } from '../../../plugins/types.js';
import {
  attributeNameProblem,
  buildSlices,
  deviceName,
  PCI_BUS_ID,
  publishedDevices,
  type ResourceSlice,
  SLICE_LIMITS,
  sliceName,
} from './resource-slices.js';
import type { SliceTarget } from './slices-config.js';

const record = (over: Partial<MediaRecord> = {}): MediaRecord => ({
  key: 'nvme:k',
  condition: 'clean',
  burned: false,
  since: 1,
  lastAddress: '',
  arqUuid: '',
  instanceUuid: '',
  reason: '',
  ...over,
});

const device = (address: string, over: Partial<DiscoveredDevice> = {}) =>
  ({
    address,
    vendorId: '144d',
    productId: 'a824',
    numaNode: 1,
    iommuGroup: 17,
    resourceClass: 'CUSTOM_NVME_144D_A824',
    health: 'healthy',
    healthReason: '',
    supportsCleaning: true,
    unallocatableReason: '',
    media: { key: `nvme:nqn.2014-08.org.nvmexpress:uuid:${address}` },
    mediaRecord: record(),
    ...over,
  }) as DiscoveredDevice;

const TARGET: SliceTarget = { driver: 'berth.dev', pool: 'k8s-host', nodeName: 'k8s-host' };
const never = () => false;
const addr = (i: number) =>
  `0000:${(i >> 8).toString(16).padStart(2, '0')}:${((i >> 3) & 31).toString(16).padStart(2, '0')}.${i & 7}`;

describe('ResourceSlices: the devices Berth publishes', () => {
  it('publishes a clean, allocatable device with the standard PCI attribute and Berth’s, valid for Kubernetes', () => {
    const d = device('0000:3b:00.1', {
      media: { key: 'pci-dsn:00-11-22-33-44-55-66-77' } as DiscoveredDevice['media'],
    });
    const { devices, withheld } = publishedDevices([d], never);
    expect(withheld).toEqual([]);
    expect(devices).toEqual([
      {
        name: 'pci-0000-3b-00-1',
        attributes: {
          [PCI_BUS_ID]: { string: '0000:3b:00.1' },
          vendor: { string: '144d' },
          product: { string: 'a824' },
          numaNode: { int: 1 },
          iommuGroup: { int: 17 },
          resourceClass: { string: 'CUSTOM_NVME_144D_A824' },
          mediaKey: { string: 'pci-dsn:00-11-22-33-44-55-66-77' },
          mediaKeySha256: { string: expect.stringMatching(/^[0-9a-f]{64}$/) },
        },
      },
    ]);
    const [slice] = buildSlices(TARGET, devices, 7);
    expect(slice).toEqual({
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceSlice',
      metadata: { name: 'k8s-host-berth.dev-0' },
      spec: {
        driver: 'berth.dev',
        nodeName: 'k8s-host',
        pool: { name: 'k8s-host', generation: 7, resourceSliceCount: 1 },
        devices,
      },
    });
    expect(sliceProblems(slice)).toEqual([]);
  });

  it('leaves out (never taints) a device that is held, dirty, being cleaned, unhealthy, unallocatable or not cleaned by Berth', () => {
    const all = [
      device('0000:01:00.0'),
      device('0000:02:00.0', {
        mediaRecord: record({ condition: 'held', instanceUuid: 'vm-1', arqUuid: 'a-1' }),
      }),
      device('0000:03:00.0', { mediaRecord: record({ condition: 'dirty' }) }),
      device('0000:04:00.0', { media: { key: 'nvme:being-cleaned' } as DiscoveredDevice['media'] }),
      device('0000:05:00.0', { health: 'unhealthy', healthReason: 'link down' } as Partial<DiscoveredDevice>),
      device('0000:06:00.0', { unallocatableReason: 'the host boots from it' }),
      device('0000:07:00.0', { supportsCleaning: false }),
      device('0000:08:00.0', { mediaRecord: record({ burned: true }) }),
    ];
    const { devices, withheld } = publishedDevices(all, (key) => key === 'nvme:being-cleaned');
    expect(devices.map((d) => d.name)).toEqual(['pci-0000-01-00-0']);
    expect(Object.fromEntries(withheld.map((w) => [w.address, w.reason]))).toEqual({
      '0000:02:00.0': expect.stringContaining('vm-1'),
      '0000:03:00.0': expect.stringContaining('dirty'),
      '0000:04:00.0': 'it is being cleaned',
      '0000:05:00.0': expect.stringContaining('link down'),
      '0000:06:00.0': 'the host boots from it',
      '0000:07:00.0': expect.stringContaining('does not clean it'),
      '0000:08:00.0': expect.stringContaining('burned'),
    });
    for (const s of buildSlices(TARGET, devices, 1)) {
      expect(s.spec.devices.every((d) => !('taints' in d))).toBe(true);
      expect(sliceProblems(s)).toEqual([]);
    }
  });

  it('keeps every attribute within the limits: a media key beyond 64 characters is published by its digest only', () => {
    const nqn = `nvme:nqn.2014-08.com.example:${'x'.repeat(190)}`;
    const d = device('0000:01:00.0', {
      numaNode: -1,
      iommuGroup: null,
      media: { key: nqn } as DiscoveredDevice['media'],
    });
    const [published] = publishedDevices([d], never).devices;
    expect(published!.attributes.mediaKey).toBeUndefined();
    expect(published!.attributes.mediaKeySha256).toEqual({ string: expect.stringMatching(/^[0-9a-f]{64}$/) });
    expect(published!.attributes.numaNode).toBeUndefined();
    expect(published!.attributes.iommuGroup).toBeUndefined();
    expect(sliceProblems(buildSlices(TARGET, [published!], 1)[0])).toEqual([]);
  });

  it('splits a pool of more than 128 devices into slices of one generation, each counting them all', () => {
    const devices = publishedDevices(
      Array.from({ length: 300 }, (_, i) => device(addr(i))),
      never,
    ).devices;
    const slices = buildSlices(TARGET, devices, 4);
    expect(slices.map((s) => s.spec.devices.length)).toEqual([128, 128, 44]);
    expect(new Set(slices.map((s) => s.metadata.name)).size).toBe(3);
    for (const s of slices) {
      expect(s.spec.pool).toEqual({ name: 'k8s-host', generation: 4, resourceSliceCount: 3 });
      expect(sliceProblems(s)).toEqual([]);
    }
    expect(slices.flatMap((s) => s.spec.devices)).toEqual(devices);
    expect(buildSlices(TARGET, devices, 4, 100).map((s) => s.spec.devices.length)).toEqual([100, 100, 100]);
    expect(() => buildSlices(TARGET, devices, 4, 129)).toThrow(/\[1, 128\], got 129/);
  });

  it('publishes a pool without devices as one empty slice (consumers drop what it had)', () => {
    const slices = buildSlices(TARGET, [], 9);
    expect(slices).toHaveLength(1);
    expect(slices[0]!.spec).toMatchObject({ devices: [], pool: { generation: 9, resourceSliceCount: 1 } });
    expect(sliceProblems(slices[0])).toEqual([]);
  });

  it('names slices and devices as Kubernetes requires, a digest when the plain name is too long', () => {
    expect(deviceName('0000:AF:1f.7')).toBe('pci-0000-af-1f-7');
    const long = {
      ...TARGET,
      nodeName: `${'n'.repeat(63)}.${'m'.repeat(63)}.${'o'.repeat(63)}.${'p'.repeat(55)}`,
    };
    const name = sliceName(long, 2);
    expect(name).toMatch(/^berth-[0-9a-f]{32}-2$/);
    expect(sliceName(long, 2)).toBe(name);
    expect(() => buildSlices({ ...TARGET, driver: 'Berth_Dev' }, [], 1)).toThrow(
      /"Berth_Dev" is not a DNS subdomain/,
    );
    expect(attributeNameProblem('numaNode')).toBeNull();
    expect(attributeNameProblem(PCI_BUS_ID)).toBeNull();
    expect(attributeNameProblem('9lives')).toMatch(/C identifier/);
    expect(attributeNameProblem(`a${'b'.repeat(32)}`)).toMatch(/at most 32/);
    expect(attributeNameProblem(`${'d'.repeat(64)}.io/x`)).toMatch(/domain/);
  });

  it('builds only valid slices from any host (property: random addresses, media keys, topology)', () => {
    const hostDevice = fc.record({
      n: fc.integer({ min: 0, max: 2047 }),
      key: fc.option(fc.string({ minLength: 1, maxLength: 300, unit: 'binary' }), { nil: undefined }),
      numa: fc.integer({ min: -1, max: 64 }),
      group: fc.option(fc.integer({ min: 0, max: 100_000 }), { nil: null }),
      vendor: fc.string({ minLength: 0, maxLength: 80, unit: 'binary' }),
      cls: fc.string({ minLength: 1, maxLength: 255 }),
      clean: fc.boolean(),
    });
    fc.assert(
      fc.property(
        fc.uniqueArray(hostDevice, { selector: (d) => d.n, maxLength: 400 }),
        fc.nat(1000),
        (hs, gen) => {
          const ds = hs.map((h) =>
            device(addr(h.n), {
              vendorId: h.vendor,
              resourceClass: h.cls,
              numaNode: h.numa,
              iommuGroup: h.group,
              ...(h.key === undefined
                ? { media: undefined }
                : { media: { key: h.key } as DiscoveredDevice['media'] }),
              mediaRecord: record({ condition: h.clean ? 'clean' : 'dirty' }),
            }),
          );
          const { devices } = publishedDevices(ds, never);
          expect(devices.length).toBe(hs.filter((h) => h.clean).length);
          const slices = buildSlices(TARGET, devices, gen);
          for (const s of slices) expect(sliceProblems(s)).toEqual([]);
        },
      ),
      { numRuns: 25 },
    );
  });
});

describe("ResourceSlices: Kubernetes' own schema (test/fixtures/kubernetes)", () => {
  const good = (): ResourceSlice =>
    buildSlices(TARGET, publishedDevices([device('0000:01:00.0')], never).devices, 1)[0]!;
  const validate = resourceSliceValidator();

  it('accepts what Berth builds and refuses planted invalid objects', () => {
    expect(validate(good())).toBe(true);
    const planted: [string, (s: ResourceSlice) => unknown][] = [
      ['no pool', (s) => ({ ...s, spec: { ...s.spec, pool: undefined } })],
      ['no driver', (s) => ({ ...s, spec: { ...s.spec, driver: undefined } })],
      [
        'generation as a string',
        (s) => ({ ...s, spec: { ...s.spec, pool: { ...s.spec.pool, generation: '1' } } }),
      ],
      [
        'a pool without resourceSliceCount',
        (s) => ({ ...s, spec: { ...s.spec, pool: { name: 'p', generation: 1 } } }),
      ],
      [
        'an int attribute as a string',
        (s) => {
          s.spec.devices[0]!.attributes.numaNode = { int: '1' } as unknown as { int: number };
          return s;
        },
      ],
      ['a device without a name', (s) => ({ ...s, spec: { ...s.spec, devices: [{ attributes: {} }] } })],
      ['an unknown field (strict field validation)', (s) => ({ ...s, spec: { ...s.spec, device: [] } })],
      [
        'an unknown attribute value type',
        (s) => {
          s.spec.devices[0]!.attributes.vendor = { text: '144d' } as unknown as { string: string };
          return s;
        },
      ],
      [
        'a taint with a number as its key',
        (s) => {
          (s.spec.devices[0] as unknown as { taints: unknown[] }).taints = [{ key: 5, effect: 'NoSchedule' }];
          return s;
        },
      ],
    ];
    for (const [what, plant] of planted) {
      expect(validate(plant(good())), what).toBe(false);
      expect(sliceProblems(plant(good())).length, what).toBeGreaterThan(0);
    }
  });

  it('and the rules the schema states in prose: limits, names, one value per attribute', () => {
    const over = good();
    over.spec.devices = Array.from({ length: 129 }, (_, i) => ({ name: `d${i}`, attributes: {} }));
    const planted: [string, unknown, RegExp][] = [
      ['129 devices', over, /129 devices/],
      [
        'a 65-character value',
        mutate((s) => (s.spec.devices[0]!.attributes.vendor = { string: 'v'.repeat(65) })),
        /longer than 64/,
      ],
      [
        'two values in one attribute',
        mutate((s) => (s.spec.devices[0]!.attributes.vendor = { string: 'a', int: 1 } as never)),
        /exactly one value/,
      ],
      ['an upper-case device name', mutate((s) => (s.spec.devices[0]!.name = 'PCI-0')), /name: PCI-0/],
      [
        'no node',
        mutate((s) => delete (s.spec as Partial<ResourceSlice['spec']>).nodeName),
        /exactly one of nodeName/,
      ],
      [
        'a long attribute identifier',
        mutate((s) => (s.spec.devices[0]!.attributes[`a${'b'.repeat(32)}`] = { int: 1 })),
        /identifier/,
      ],
    ];
    for (const [what, o, problem] of planted) {
      expect(validate(o), `${what} passes the schema`).toBe(true);
      expect(sliceProblems(o).join('; '), what).toMatch(problem);
    }
    function mutate(f: (s: ResourceSlice) => unknown): ResourceSlice {
      const s = good();
      f(s);
      return s;
    }
  });

  it("the vendored schema states the limits the builder keeps (Kubernetes' own words)", () => {
    const d = resourceSliceSpec().definitions;
    const text = (name: string, prop: string) =>
      String(
        (d[`io.k8s.api.resource.v1.${name}`]!.properties as Record<string, { description: string }>)[prop]!
          .description,
      );
    expect(text('ResourceSliceSpec', 'devices')).toContain(
      `Must not have more than ${SLICE_LIMITS.devicesPerSlice} entries`,
    );
    expect(text('Device', 'attributes')).toContain(
      `maximum number of attributes and capacities combined is ${SLICE_LIMITS.attributesPerDevice}`,
    );
    expect(text('DeviceAttribute', 'string')).toContain(
      `Must not be longer than ${SLICE_LIMITS.valueLength} characters`,
    );
    expect(text('Device', 'name')).toContain('must be a DNS label');
  });
});
