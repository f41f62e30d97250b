import { describe, expect, it } from 'vitest';
import { violatedFields } from '../../../../test/helpers/errors.js';
import { BerthError } from '../../../errors.js';
import { parseTag } from '../../../identifiers.js';
import { type Arq, attachHandleFromAddress, canTransition, transitionArq } from './arq.js';
import { pci, testUuid } from './fixtures.support.js';
import { sameProfileSpec, validateProfile } from './profile.js';
import { assertUniqueTags } from './tags.js';

describe('validateProfile', () => {
  it('normalises a valid profile: count 0 → 1, lower-case ids, deduplicated traits', () => {
    const p = validateProfile({
      name: 'gpu.small-1',
      groups: [{ vendorId: '10DE', productId: '25B6', requiredTraits: ['CUSTOM_A', 'CUSTOM_A'], count: 0 }],
    });
    expect(p.groups[0]).toEqual({
      resourceClass: '',
      vendorId: '10de',
      productId: '25b6',
      requiredTraits: ['CUSTOM_A'],
      forbiddenTraits: [],
      liveMigratable: 'unset',
      count: 1,
    });
    expect(
      sameProfileSpec(
        p,
        validateProfile({
          name: 'gpu.small-1',
          groups: [{ vendorId: '10de', productId: '25b6', requiredTraits: ['CUSTOM_A'] }],
        }),
      ),
    ).toBe(true);
  });

  it('reports every violation with its field path', () => {
    expect(
      violatedFields(() =>
        validateProfile({
          name: 'bad name',
          groups: [
            {
              resourceClass: 'CUSTOM_X',
              requiredTraits: ['CUSTOM_OK', 'lower'],
              forbiddenTraits: ['CUSTOM_OK'],
              count: 65,
            },
            { vendorId: 'xyz', productId: '12345' },
            {},
            { resourceClass: 'CUSTOM_X', vendorId: '10de', productId: '0001' },
          ],
        }),
      ),
    ).toEqual([
      'profile.name',
      'profile.groups[0].required_traits[1]',
      'profile.groups[0].forbidden_traits[0]',
      'profile.groups[0].count',
      'profile.groups[1].vendor_id',
      'profile.groups[1].product_id',
      'profile.groups[2].resource_class',
      'profile.groups[3].resource_class',
    ]);
    expect(violatedFields(() => validateProfile({ name: 'p', groups: [] }))).toEqual(['profile.groups']);
    expect(
      violatedFields(() =>
        validateProfile({ name: 'p', groups: [{ resourceClass: `CUSTOM_${'A'.repeat(249)}` }] }),
      ),
    ).toEqual(['profile.groups[0].resource_class']);
  });
});

describe('ARQs', () => {
  const arq: Arq = {
    uuid: testUuid('a'),
    profileName: 'p',
    groupId: 0,
    group: {
      resourceClass: 'X',
      vendorId: '',
      productId: '',
      requiredTraits: [],
      forbiddenTraits: [],
      liveMigratable: 'unset',
      count: 1,
    },
    state: 'initial',
    instanceUuid: null,
    host: null,
    deviceUuid: null,
    deviceAddress: null,
    attachHandle: null,
    tag: '',
    error: '',
    createdAt: '',
    deviceType: '',
  };

  it('enforces the transition table', () => {
    expect(canTransition('initial', 'bound')).toBe(false);
    expect(canTransition('bind_failed', 'bind_started')).toBe(true);
    expect(() => transitionArq(arq, 'bound')).toThrow(/cannot go from initial to bound/);
    expect(transitionArq(transitionArq(arq, 'bind_started'), 'bound').state).toBe('bound');
    expect(() => transitionArq({ ...arq, state: 'deleting' }, 'bind_started')).toThrow(BerthError);
  });

  it('derives the attach handle from the PCI address', () => {
    expect(attachHandleFromAddress(pci('0000:3b:1f.7'), false)).toEqual({
      domain: '0000',
      bus: '3b',
      device: '1f',
      function: '7',
      managed: false,
    });
    // @ts-expect-error: an address that skipped parsePciAddress (which refuses upper case) does not type-check
    expect(() => attachHandleFromAddress('0000:3B:00.0', true)).toBeTypeOf('function');
  });
});

describe('tags', () => {
  it('follows Nova: 1-60 characters, no , or /', () => {
    expect(parseTag('t', 'nvme-scratch')).toBe('nvme-scratch');
    expect(parseTag('t', '')).toBe('');
    expect(() => parseTag('bindings[0].tag', 'a/b')).toThrow(/bindings\[0\]\.tag.*"a\/b"/);
    expect(() => parseTag('t', 'a,b')).toThrow(BerthError);
    expect(() => parseTag('t', 'x'.repeat(61))).toThrow(/61 characters/);
  });

  it('is unique within (instance, device type)', () => {
    expect(() =>
      assertUniqueTags([
        { field: 'nics[0].tag', deviceType: 'nic', tag: 'a' },
        { field: 'disks[0].tag', deviceType: 'disk', tag: 'a' },
        { field: 'nics[1].tag', deviceType: 'nic', tag: '' },
        { field: 'nics[2].tag', deviceType: 'nic', tag: '' },
      ]),
    ).not.toThrow();
    expect(() =>
      assertUniqueTags([
        { field: 'nics[0].tag', deviceType: 'nic', tag: 'a' },
        { field: 'nics[1].tag', deviceType: 'nic', tag: 'a' },
      ]),
    ).toThrow(/nics\[1\]\.tag: tag "a" is already used by nics\[0\]\.tag/);
  });
});
