import { describe, expect, it } from 'vitest';
import { BerthError } from './errors.js';
import {
  isHostName,
  isPciAddress,
  isResourceClass,
  isTrait,
  isUuid,
  parseHostName,
  parsePciAddress,
  parseResourceClass,
  parseTrait,
  parseUuid,
  pciAddressParts,
} from './identifiers.js';

/** The INVALID_ARGUMENT `parse` throws for `value`, naming `field` and the value. */
function refusal(parse: (field: string, value: unknown) => unknown, value: unknown): BerthError {
  try {
    parse('the.field', value);
  } catch (e) {
    expect(e).toBeInstanceOf(BerthError);
    const err = e as BerthError;
    expect(err.code).toBe('INVALID_ARGUMENT');
    expect(err.fieldViolations[0]?.field).toBe('the.field');
    // The value, quoted (cut to 80 characters, so without the closing quote here).
    if (typeof value === 'string')
      expect(err.message).toContain(JSON.stringify(value.slice(0, 80)).slice(0, -1));
    return err;
  }
  throw new Error(`${JSON.stringify(value)} was accepted`);
}

const NOT_STRINGS = [undefined, null, 3, {}, ['0000:3b:00.0']];

describe('PCI addresses', () => {
  it.each(['0000:3b:00.0', 'ffff:ff:1f.7', '0214:90:00.3', '0000:00:00.0'])('accepts %j as it is', (a) => {
    expect(parsePciAddress('address', a)).toBe(a);
    expect(isPciAddress(a)).toBe(true);
  });

  it.each([
    '../x',
    // Upper case is refused, as before: sysfs names functions in lower case, and the CLI
    // (normalizePciAddress) turns what a user types into that form before it is sent.
    '0000:3B:00.0',
    '3b:00.0',
    '0000:3b:00.8',
    '0000:3b:00',
    '0000:3b:00.0/',
    '0000:3b:00.0/../../x',
    ' 0000:3b:00.0',
    '0000:3b:00.0\n',
    '00000:3b:00.0',
    '0000:3b:0g.0',
    '',
  ])('refuses %j, naming the field and the value', (bad) => {
    expect(refusal(parsePciAddress, bad).message).toMatch(/is not a PCI address like 0000:3b:02\.0/);
    expect(isPciAddress(bad)).toBe(false);
  });

  it.each(NOT_STRINGS)('refuses a non-string (%j)', (v) => {
    refusal(parsePciAddress, v);
    expect(isPciAddress(v)).toBe(false);
  });

  it('splits an address into its fields', () => {
    expect(pciAddressParts(parsePciAddress('a', '0214:90:1f.7'))).toEqual({
      domain: '0214',
      bus: '90',
      slot: '1f',
      function: '7',
    });
  });
});

describe('UUIDs', () => {
  it('accepts either case and returns the canonical lower-case form', () => {
    const u = '0D5A3F1C-6F1B-4C7E-9A2B-3C4D5E6F7A8B';
    expect(parseUuid('uuid', u)).toBe(u.toLowerCase());
    expect(parseUuid('uuid', u.toLowerCase())).toBe(u.toLowerCase());
  });

  it('guards the canonical form only: an upper-case UUID has not been parsed', () => {
    expect(isUuid('0d5a3f1c-6f1b-4c7e-9a2b-3c4d5e6f7a8b')).toBe(true);
    expect(isUuid('0D5A3F1C-6F1B-4C7E-9A2B-3C4D5E6F7A8B')).toBe(false);
  });

  it.each([
    '',
    '0d5a3f1c6f1b4c7e9a2b3c4d5e6f7a8b',
    '0d5a3f1c-6f1b-4c7e-9a2b-3c4d5e6f7a8',
    '0d5a3f1c-6f1b-4c7e-9a2b-3c4d5e6f7a8bb',
    '{0d5a3f1c-6f1b-4c7e-9a2b-3c4d5e6f7a8b}',
    '0d5a3f1c-6f1b-4c7e-9a2b-3c4d5e6f7a8g',
    ' 0d5a3f1c-6f1b-4c7e-9a2b-3c4d5e6f7a8b',
    ...NOT_STRINGS,
  ])('refuses %j', (bad) => {
    expect(refusal(parseUuid, bad).message).toMatch(/is not a UUID/);
    expect(isUuid(bad)).toBe(false);
  });
});

describe('host names', () => {
  it.each(['h', 'sim-host-1', 'compute-7.example.org', 'Host_A', '10.0.0.1', 'a'.repeat(254)])(
    'accepts %j as it is (case kept)',
    (h) => {
      expect(parseHostName('host', h)).toBe(h);
      expect(isHostName(h)).toBe(true);
    },
  );

  it.each(['', '-h', 'h-', '.h', 'h.', 'a b', 'h/x', '../h', 'h:7071', 'a'.repeat(255), ...NOT_STRINGS])(
    'refuses %j',
    (bad) => {
      expect(refusal(parseHostName, bad).message).toMatch(/is not a host name/);
      expect(isHostName(bad)).toBe(false);
    },
  );

  it('shows a long value cut to 80 characters', () => {
    expect(refusal(parseHostName, `${'x'.repeat(300)}/`).message).toContain(`"${'x'.repeat(80)}…"`);
  });
});

describe('resource classes and traits (one rule: docs/decisions.md 60)', () => {
  const good = [
    'CUSTOM_X',
    'CUSTOM_PCI_8086_1572',
    'CUSTOM_',
    'PCI_DEVICE',
    'VGPU',
    'HW_GPU_API_VULKAN',
    'OWNER_BERTH',
    `CUSTOM_${'A'.repeat(248)}`,
    'A'.repeat(255),
  ].filter((n) => n !== 'CUSTOM_');
  const bad = [
    '',
    'CUSTOM_',
    'custom_x',
    'CUSTOM_x',
    'CUSTOM-X',
    'pci_device',
    '1GPU',
    '_X',
    'CUSTOM_X ',
    `CUSTOM_${'A'.repeat(249)}`,
    'A'.repeat(256),
    ...NOT_STRINGS,
  ];

  it.each(good)('accepts %j as a resource class and as a trait', (n) => {
    expect(parseResourceClass('rc', n)).toBe(n);
    expect(parseTrait('t', n)).toBe(n);
    expect(isResourceClass(n)).toBe(true);
    expect(isTrait(n)).toBe(true);
  });

  it.each(bad)('refuses %j as either', (n) => {
    expect(refusal(parseResourceClass, n).message).toMatch(/is not a resource class/);
    expect(refusal(parseTrait, n).message).toMatch(/is not a trait/);
    expect(isResourceClass(n)).toBe(false);
    expect(isTrait(n)).toBe(false);
  });
});
