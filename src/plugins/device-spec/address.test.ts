import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import {
  addressMatches,
  isValidPciAddress,
  parseAddressGlob,
  parseAddressRegex,
  singleAddressOf,
  splitAddress,
} from './address.js';

const W = 'pci.device_spec[0].address';

describe('isValidPciAddress', () => {
  it.each([
    ['0000:3b:00.1', true],
    ['ffff:ff:1f.7', true],
    ['0000:3B:00.1', false],
    ['0000:3b:00.8', false],
    ['000:3b:00.1', false],
    ['0000:3b:00', false],
    ['0000:3b:00.1 ', false],
    ['0000-3b-00.1', false],
    ['0000:3b:00x1', false],
    ['', false],
  ])('%j -> %j', (address, expected) => {
    expect(isValidPciAddress(address)).toBe(expected);
  });

  it('splits a valid address and refuses an invalid one', () => {
    expect(splitAddress('0001:3b:1f.7')).toEqual({ domain: '0001', bus: '3b', slot: '1f', function: '7' });
    expect(splitAddress('0001:3b:1f')).toBeNull();
  });
});

describe('parseAddressGlob: fields fill from the right, empty = *', () => {
  it.each([
    // [glob, domain, bus, slot, function, exact]
    ['0000:0a:00.1', '0000', '0a', '00', '1', true],
    ['0a', '*', '*', '0a', '*', false], // a single field is the slot
    ['0a:00', '*', '0a', '00', '*', false],
    ['0a:00.1', '*', '0a', '00', '1', false],
    ['1:a:1.1', '0001', '0a', '01', '1', true],
    ['0000:0A:1F.7', '0000', '0a', '1f', '7', true],
    ['*:0a:00.*', '*', '0a', '00', '*', false],
    ['*:*:*.*', '*', '*', '*', '*', false],
    ['', '*', '*', '*', '*', false],
    ['.', '*', '*', '*', '*', false],
    ['.3', '*', '*', '*', '3', false],
    [':00.', '*', '*', '00', '*', false],
    ['::.', '*', '*', '*', '*', false],
    ['0000::00.0', '0000', '*', '00', '0', false],
    [' 0000 : 0a : 00 . 1 ', '0000', '0a', '00', '1', true],
    ['0x0a:0x1f.0x7', '*', '0a', '1f', '7', false],
    ['00000a:001f.0', '*', '0a', '1f', '0', false], // leading zeros, as Python's int() allows
    ['ffff:ff:1f.7', 'ffff', 'ff', '1f', '7', true],
  ])('%j', (glob, domain, bus, slot, fn, exact) => {
    expect(parseAddressGlob(glob, W)).toEqual({ kind: 'glob', domain, bus, slot, function: fn, exact });
  });

  it.each([
    ['0000:0a:20.0', 'slot'],
    ['0000:100:00.0', 'bus'],
    ['10000:00:00.0', 'domain'],
    ['0a:00.8', 'function'],
    ['g0:00.0', 'bus'],
    ['0a:00.-1', 'function'],
    ['0a:00:00:00.0', 'fields'],
    ['0a:0?.0', 'slot'],
  ])('refuses %j (%s)', (glob, part) => {
    expect(() => parseAddressGlob(glob, W)).toThrow(ConfigError);
    expect(() => parseAddressGlob(glob, W)).toThrow(part);
    expect(() => parseAddressGlob(glob, W)).toThrow(W);
  });
});

describe('parseAddressRegex', () => {
  it('anchors each field at the start only, like re.match', () => {
    const spec = parseAddressRegex({ bus: '3', slot: '0', function: '[0-2]' }, W);
    expect(addressMatches(spec, '0000:3b:00.1')).toBe(true); // "3" matches the start of "3b"
    expect(addressMatches(spec, '0000:b3:00.1')).toBe(false); // not anywhere in it
    expect(addressMatches(spec, '0000:3b:00.3')).toBe(false);
    expect(addressMatches(spec, '0000:3b:10.1')).toBe(false);
  });

  it('keeps alternation inside the anchor', () => {
    const spec = parseAddressRegex({ bus: '3b|5e' }, W);
    expect(addressMatches(spec, '0000:5e:00.0')).toBe(true);
    expect(addressMatches(spec, '0000:e5:00.0')).toBe(false);
    expect(spec.bus?.test('x5e')).toBe(false);
  });

  it('treats missing fields as any and matches lower-case fields', () => {
    const spec = parseAddressRegex({}, W);
    expect(addressMatches(spec, 'abcd:ef:1f.7')).toBe(true);
    expect(addressMatches(parseAddressRegex({ bus: 'EF' }, W), 'abcd:ef:1f.7')).toBe(false);
    expect(addressMatches(parseAddressRegex({ bus: 'e.$' }, W), 'abcd:ef:1f.7')).toBe(true);
  });

  it('names the single address of an all-hex regex object (Nova: is_single_address)', () => {
    expect(parseAddressRegex({ domain: '0000', bus: '3b', slot: '00', function: '0' }, W).singleAddress).toBe(
      '0000:3b:00.0',
    );
    expect(parseAddressRegex({ domain: '0000', bus: '3b', slot: '00' }, W).singleAddress).toBeNull();
    expect(
      parseAddressRegex({ domain: '0', bus: '3b', slot: '00', function: '0' }, W).singleAddress,
    ).toBeNull();
    expect(
      parseAddressRegex({ domain: '0000', bus: '3.', slot: '00', function: '0' }, W).singleAddress,
    ).toBeNull();
  });

  it.each([
    [{ bus: '(' }],
    [{ bus: 'a)|(b' }],
    [{ slot: '\\' }],
    [{ domain: '*' }],
    [{ bus: 1 }],
    [{ func: '0' }],
  ])('refuses %j', (raw) => {
    expect(() => parseAddressRegex(raw, W)).toThrow(ConfigError);
  });
});

describe('singleAddressOf', () => {
  it('is the address of an exact glob, else null', () => {
    expect(singleAddressOf(parseAddressGlob('0000:3b:00.0', W))).toBe('0000:3b:00.0');
    expect(singleAddressOf(parseAddressGlob('3b:00.0', W))).toBeNull();
  });

  it('never matches an invalid device address', () => {
    expect(addressMatches(parseAddressGlob('', W), 'nonsense')).toBe(false);
  });
});
