import { describe, expect, it } from 'vitest';
import { parseUuid } from '../../../identifiers.js';
import { CyborgHttpError, parsePatchList, profileInputFromCyborg, requestedVersion } from './shapes.js';

const status = (f: () => unknown): number => {
  try {
    f();
  } catch (err) {
    if (err instanceof CyborgHttpError) return err.status;
    throw err;
  }
  return 0;
};

describe("Cyborg's microversions", () => {
  it('reads the header as microversion_parse and Cyborg do', () => {
    expect(requestedVersion(undefined)).toEqual({ major: 2, minor: 0 });
    expect(requestedVersion('accelerator 2.1')).toEqual({ major: 2, minor: 1 });
    expect(requestedVersion('compute 2.82, accelerator 2.2')).toEqual({ major: 2, minor: 2 });
    expect(requestedVersion('compute 2.82')).toEqual({ major: 2, minor: 0 });
    expect(requestedVersion('2.3')).toEqual({ major: 2, minor: 3 });
    expect(requestedVersion('accelerator latest')).toEqual({ major: 2, minor: 3 });
    for (const bad of [
      'accelerator 2.4',
      'accelerator 1.0',
      'accelerator 3.0',
      'accelerator 2',
      'accelerator x.y',
    ]) {
      expect(
        status(() => requestedVersion(bad)),
        bad,
      ).toBe(406);
    }
  });
});

describe('PATCH /v2/accelerator_requests', () => {
  const arq = '5b2a1b1c-0000-4000-8000-000000000001';
  const rp = '5b2a1b1c-0000-4000-8000-000000000002';
  const inst = '5b2a1b1c-0000-4000-8000-000000000003';
  const bind = (extra: object[] = []) => [
    { path: '/hostname', op: 'add', value: 'h1' },
    { path: '/device_rp_uuid', op: 'add', value: rp },
    { path: '/instance_uuid', op: 'add', value: inst },
    ...extra,
  ];

  it('reads a bind and an unbind', () => {
    expect(parsePatchList({ [arq]: bind() }, { minor: 0 })).toEqual([
      { op: 'add', arqUuid: arq, hostname: 'h1', deviceRpUuid: rp, instanceUuid: inst, projectId: null },
    ]);
    expect(parsePatchList({ [arq]: [{ path: '/hostname', op: 'remove' }] }, { minor: 0 })).toEqual([
      { op: 'remove', arqUuid: arq },
    ]);
  });

  it('refuses what Cyborg refuses, naming the field', () => {
    const cases: Array<[unknown, number, string]> = [
      [[], 400, 'body'],
      [{}, 400, 'no ARQ'],
      [{ [arq]: [...bind(), { path: '/hostname', op: 'remove' }] }, 400, 'Every op must be add or remove'],
      [{ [arq]: bind([{ path: '/project_id', op: 'add', value: 'p' }]) }, 406, '2.1'],
      [
        { [arq]: [{ path: '/instance_uuid', op: 'add', value: 'nope' }, ...bind().slice(0, 2)] },
        400,
        'instance_uuid',
      ],
      [{ [arq]: [{ path: '/hostname', op: 'add', value: 'a b' }, ...bind().slice(1)] }, 400, 'hostname'],
    ];
    for (const [body, code, says] of cases) {
      let err: CyborgHttpError | null = null;
      try {
        parsePatchList(body, { minor: 0 });
      } catch (e) {
        err = e as CyborgHttpError;
      }
      expect(err?.status, JSON.stringify(body)).toBe(code);
      expect(err?.message).toContain(says);
    }
    expect(
      parsePatchList({ [arq]: bind([{ path: '/project_id', op: 'add', value: 'p' }]) }, { minor: 1 })[0],
    ).toMatchObject({
      projectId: 'p',
    });
  });

  it("one ARQ's own URL: the body keyed by that uuid alone, as openstacksdk sends it", () => {
    const own = parseUuid('arq', arq);
    const unbind = [{ path: '/hostname', op: 'remove' }];
    expect(parsePatchList({ [arq.toUpperCase()]: unbind }, { minor: 0 }, own)).toEqual([
      { op: 'remove', arqUuid: arq },
    ]);
    expect(parsePatchList({ [arq]: bind() }, { minor: 0 }, own)[0]).toMatchObject({
      op: 'add',
      arqUuid: arq,
    });
    const other = '5b2a1b1c-0000-4000-8000-000000000009';
    const cases: Array<[unknown, string]> = [
      [{ [other]: unbind }, `not by "${other}"`],
      [{ hostname: unbind }, 'not by "hostname"'],
      [{ [arq]: unbind, [other]: unbind }, `2 keys ("${arq}", "${other}")`],
    ];
    for (const [body, says] of cases) {
      let err: CyborgHttpError | null = null;
      try {
        parsePatchList(body, { minor: 0 }, own);
      } catch (e) {
        err = e as CyborgHttpError;
      }
      expect(err?.status, JSON.stringify(body)).toBe(400);
      expect(err?.message).toContain(says);
      expect(err?.message).toContain(arq);
    }
  });
});

describe('device profiles from Cyborg', () => {
  it("maps Nova's default class to vendor/product, other classes and traits as they are", () => {
    const p = profileInputFromCyborg([
      {
        name: 'p',
        groups: [
          {
            'resources:CUSTOM_PCI_144D_A824': '2',
            'trait:CUSTOM_FAST': 'required',
            'trait:HW_PCI_LIVE_MIGRATABLE': 'forbidden',
          },
          { 'resources: CUSTOM_GPU ': '1', 'trait:CUSTOM_OLD': 'forbidden' },
        ],
      },
    ]);
    expect(p.groups).toEqual([
      {
        vendorId: '144d',
        productId: 'a824',
        count: 2,
        requiredTraits: ['CUSTOM_FAST'],
        forbiddenTraits: [],
        liveMigratable: 'no',
      },
      {
        resourceClass: 'CUSTOM_GPU',
        count: 1,
        requiredTraits: [],
        forbiddenTraits: ['CUSTOM_OLD'],
        liveMigratable: 'unset',
      },
    ]);
  });

  it('refuses two classes in a group, accel: keys, bad counts and names', () => {
    for (const body of [
      [{ name: 'p', groups: [{ 'resources:CUSTOM_A': '1', 'resources:CUSTOM_B': '1' }] }],
      [{ name: 'p', groups: [{ 'resources:CUSTOM_A': '1', 'accel:function_id': 'x' }] }],
      [{ name: 'p', groups: [{ 'resources:CUSTOM_A': '0' }] }],
      [{ name: 'p', groups: [{ 'trait:CUSTOM_A': 'required' }] }],
      [{ name: 'p q', groups: [{ 'resources:CUSTOM_A': '1' }] }],
      [{ name: 'p', groups: [] }],
      [
        { name: 'p', groups: [{ 'resources:CUSTOM_A': '1' }] },
        { name: 'q', groups: [] },
      ],
    ]) {
      expect(
        status(() => profileInputFromCyborg(body)),
        JSON.stringify(body),
      ).toBe(400);
    }
  });
});
