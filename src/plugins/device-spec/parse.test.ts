import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import { parseBool, parseDeviceSpecs } from './parse.js';
import type { DeviceSpecEntry, ParseOptions } from './types.js';

const PCI: ParseOptions = { section: 'pci', cleanupKeys: false };
const NVME: ParseOptions = { section: 'nvme', cleanupKeys: true };

function one(raw: unknown, options: ParseOptions = PCI): DeviceSpecEntry {
  const entries = parseDeviceSpecs(raw, options);
  expect(entries).toHaveLength(1);
  return entries[0]!;
}

function configError(run: () => unknown): ConfigError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('expected a ConfigError, nothing was thrown');
}

describe('parseBool (oslo strict)', () => {
  it.each<[unknown, boolean]>([
    [true, true],
    [false, false],
    [1, true],
    [0, false],
    ...['1', 't', 'true', 'on', 'y', 'yes', ' TRUE ', 'Yes', 'On', 'T', '\tY\n'].map(
      (s): [unknown, boolean] => [s, true],
    ),
    ...['0', 'f', 'false', 'off', 'n', 'no', ' FALSE ', 'No', 'OFF', 'F', ' n '].map(
      (s): [unknown, boolean] => [s, false],
    ),
  ])('%j -> %j', (value, expected) => {
    expect(parseBool(value, 'x.managed')).toBe(expected);
  });

  it.each([
    ['maybe'],
    [''],
    ['  '],
    ['2'],
    [2],
    [-1],
    [0.5],
    [null],
    [undefined],
    [[]],
    [{}],
    ['truee'],
    ['yes!'],
  ])('refuses %j, naming where and the value', (value) => {
    const error = configError(() => parseBool(value, 'pci.device_spec[3].managed'));
    expect(error.message).toContain('pci.device_spec[3].managed');
    expect(error.message).toContain(value === undefined ? 'undefined' : JSON.stringify(value));
  });
});

describe('parseDeviceSpecs: shapes', () => {
  it('treats undefined and null as no entries', () => {
    expect(parseDeviceSpecs(undefined, PCI)).toEqual([]);
    expect(parseDeviceSpecs(null, PCI)).toEqual([]);
    expect(parseDeviceSpecs([], PCI)).toEqual([]);
  });

  it('gives an entry every default', () => {
    expect(one({})).toEqual({
      index: 0,
      source: 'pci.device_spec[0]',
      vendorId: null,
      productId: null,
      address: null,
      devname: null,
      managed: true,
      liveMigratable: false,
      oneTimeUse: false,
      clearAction: 'auto',
      clearStrategy: 'auto',
      assumeClean: false,
      resourceClass: null,
      traits: [],
      attributes: {},
    });
  });

  it('accepts one entry, a list, JSON strings, and a JSON string holding a list (as Nova does)', () => {
    expect(one({ vendor_id: '10de' }).vendorId).toBe('10de');
    expect(one('{"vendor_id": "10de"}').vendorId).toBe('10de');
    const entries = parseDeviceSpecs(
      [{ vendor_id: '10de' }, '{"product_id": "25b6"}', '[{"vendor_id": "144d"}, {"vendor_id": "1af4"}]'],
      PCI,
    );
    expect(entries.map((e) => [e.index, e.source, e.vendorId, e.productId])).toEqual([
      [0, 'pci.device_spec[0]', '10de', null],
      [1, 'pci.device_spec[1]', null, '25b6'],
      [2, 'pci.device_spec[2][0]', '144d', null],
      [3, 'pci.device_spec[2][1]', '1af4', null],
    ]);
  });

  it('keeps the order of entries (first match wins later)', () => {
    const entries = parseDeviceSpecs([{ vendor_id: '1' }, { vendor_id: '2' }, { vendor_id: '3' }], PCI);
    expect(entries.map((e) => e.vendorId)).toEqual(['0001', '0002', '0003']);
  });

  it('accepts an entry with a null prototype', () => {
    const raw = Object.assign(Object.create(null) as object, { vendor_id: '10de' });
    expect(one(raw).vendorId).toBe('10de');
  });
});

describe('parseDeviceSpecs: values', () => {
  it.each([
    ['10de', '10de'],
    ['10DE', '10de'],
    ['0x10de', '10de'],
    ['0X10DE', '10de'],
    [' 8086 ', '8086'],
    ['a', '000a'],
    ['000010de', '10de'],
    ['ffff', 'ffff'],
    ['0', '0000'],
    ['*', null],
    ['\u00a08086\u3000', '8086'], // Python's whitespace, which int() skips
  ])('vendor_id/product_id %j -> %j', (value, expected) => {
    const entry = one({ vendor_id: value, product_id: value });
    expect(entry.vendorId).toBe(expected);
    expect(entry.productId).toBe(expected);
  });

  it('strips vendor_id before the "*" test, and not product_id (as Nova does)', () => {
    expect(one({ vendor_id: ' * ' }).vendorId).toBeNull();
    expect(one({ vendor_id: '\u001c*\u001c' }).vendorId).toBeNull(); // str.strip() removes U+001C
    expect(() => one({ product_id: ' * ' })).toThrow(/product_id: " \* " is not a hex id/);
    // int() does not skip U+001C, and neither Python nor Berth strips U+FEFF.
    expect(() => one({ product_id: '\u001c10de' })).toThrow(ConfigError);
    expect(() => one({ vendor_id: '\ufeff10de' })).toThrow(ConfigError);
  });

  it.each([['+a'], ['-1'], ['-0'], ['1_0'], ['0x_1f'], ['\u0663'], ['\uff11\uff10']])(
    'refuses the hex %j, which Python reads (a departure from Nova)',
    (value) => {
      expect(() => one({ vendor_id: value })).toThrow(
        /written with (a sign|a "_" separator|non-ASCII digits)/,
      );
      expect(() => one({ address: `${value}:00.0` })).toThrow(/written with/);
    },
  );

  it('reads booleans as oslo does from a JSON string entry: 1 and 0, not 1.0', () => {
    expect(one('{"managed": 1}').managed).toBe(true);
    expect(one('{"managed": -0}').managed).toBe(false);
    for (const text of ['1.0', '1e0', '0.0', 'NaN', 'Infinity']) {
      expect(() => one(`{"managed": ${text}}`)).toThrow(
        `pci.device_spec[0].managed: ${text} is a JSON float`,
      );
      expect(() => one(`{"one_time_use": ${text}}`)).toThrow(ConfigError);
      expect(() => one(`{"live_migratable": ${text}}`)).toThrow(ConfigError);
    }
  });

  it('reads JSON string entries as Python json.loads does', () => {
    // NaN is JSON to Python; as a value it is then refused by the key's own rule.
    expect(() => one('{"vendor_id": NaN}')).toThrow(/vendor_id: NaN is not a hex id/);
    expect(one('{"vendor_id": "8086", "vendor_id": "10de"}').vendorId).toBe('10de'); // the last one wins
    expect(() => one('{"vendor_id": "8086"} x')).toThrow(/not a JSON object \(Extra data at position 22\)/);
    expect(() => one('{"__proto__": {}}')).toThrow(/__proto__: unknown key/);
  });

  it.each([
    ['managed', 'managed', true, 'no', false],
    ['live_migratable', 'liveMigratable', false, 'yes', true],
    ['one_time_use', 'oneTimeUse', false, true, true],
  ] as const)('%s defaults to %j... and parses strictly', (key, field, _default, value, expected) => {
    expect(one({})[field]).toBe(_default);
    expect(one({ [key]: value })[field]).toBe(expected);
  });

  it.each([
    [{}, false],
    [{ assume_clean: true }, true],
    [{ assume_clean: ' Yes ' }, true],
    [{ assume_clean: 'off' }, false],
    [{ assume_clean: 0 }, false],
  ])('assume_clean %j (nvme)', (raw, expected) => {
    expect(one(raw, NVME).assumeClean).toBe(expected);
  });

  it('assume_clean in pci vouches a one-time-use device unused (decision 62); without one_time_use it is refused', () => {
    expect(one({ one_time_use: true, assume_clean: 'yes' }).assumeClean).toBe(true);
    expect(() => one({ assume_clean: true, one_time_use: false })).toThrow(
      /pci\.device_spec\[0\]\.assume_clean: true vouches for nothing in pci without one_time_use: true/,
    );
  });

  it.each([
    [{ clear_action: 'sanitize' }, 'sanitize', 'auto'],
    [{ clear_action: 'zero', clear_strategy: 'block' }, 'zero', 'block'],
    [{ clear_action: ' Sanitize ', clear_strategy: 'CRYPTO' }, 'sanitize', 'crypto'],
    [{ clear_strategy: 'crypto' }, 'auto', 'crypto'],
    [{ clear_action: 'auto', clear_strategy: 'auto' }, 'auto', 'auto'],
  ])('cleanup keys %j (nvme)', (raw, action, strategy) => {
    const entry = one(raw, NVME);
    expect(entry.clearAction).toBe(action);
    expect(entry.clearStrategy).toBe(strategy);
    expect(entry.source).toBe('nvme.device_spec[0]');
  });

  it.each([
    ['foo', 'CUSTOM_FOO'],
    ['foo-bar', 'CUSTOM_FOO_BAR'],
    ['CUSTOM_GPU', 'CUSTOM_GPU'],
    ['custom_gpu', 'CUSTOM_GPU'],
    ['PCI_DEVICE', 'PCI_DEVICE'],
    ['net_packet_rate_kilopacket_per_sec', 'NET_PACKET_RATE_KILOPACKET_PER_SEC'], // os-resource-classes 1.1
    ['', null],
  ])('resource_class %j -> %j', (value, expected) => {
    expect(one({ resource_class: value }).resourceClass).toBe(expected);
  });

  it.each([
    [
      ['foo', 'HW_GPU_CUDA_COMPUTE_CAPABILITY_V1_0', 'HW_GPU_API_CUDA'],
      ['CUSTOM_FOO', 'HW_GPU_CUDA_COMPUTE_CAPABILITY_V1_0', 'CUSTOM_HW_GPU_API_CUDA'], // not in os-traits
    ],
    ['foo,bar', ['CUSTOM_FOO', 'CUSTOM_BAR']],
    ['foo, bar ,CUSTOM_X', ['CUSTOM_FOO', 'CUSTOM_BAR', 'CUSTOM_X']],
    [['foo', 'FOO', 'custom_foo'], ['CUSTOM_FOO']],
    ['', []],
    [[], []],
  ])('traits %j -> %j', (value, expected) => {
    expect(one({ traits: value }).traits).toEqual(expected);
  });

  it('carries physical_network, trusted and remote_managed as attributes', () => {
    expect(one({ physical_network: ' physnet1 ', trusted: 'yes', remote_managed: false }).attributes).toEqual(
      {
        physical_network: 'physnet1',
        trusted: 'true',
        remote_managed: 'false',
      },
    );
  });

  it('takes a devname', () => {
    const entry = one({ devname: 'enp59s0f0', vendor_id: '8086' });
    expect(entry.devname).toBe('enp59s0f0');
    expect(entry.address).toBeNull();
  });

  it('takes a glob or a regex address', () => {
    expect(one({ address: '0a:00.1' }).address).toEqual({
      kind: 'glob',
      domain: '*',
      bus: '0a',
      slot: '00',
      function: '1',
      exact: false,
    });
    expect(one({ address: { bus: '3[bc]' } }).address).toMatchObject({ kind: 'regex', singleAddress: null });
  });
});

describe('parseDeviceSpecs: errors name the entry, the key and the value', () => {
  it.each<[string, unknown, ParseOptions, string[]]>([
    // entry shape
    ['number entry', [{}, 42], PCI, ['pci.device_spec[1]', '42', 'not an object']],
    ['nested list', [[{}]], PCI, ['pci.device_spec[0]', '[{}]']],
    ['string that is not JSON', ['vendor_id=10de'], PCI, ['pci.device_spec[0]', '"vendor_id=10de"', 'JSON']],
    ['JSON string of a number', ['7'], PCI, ['pci.device_spec[0]', 'not an object']],
    ['JSON list holding a non-object', ['[{}, 3]'], PCI, ['pci.device_spec[0][1]', '3']],
    ['top-level number', 5, PCI, ['pci.device_spec[0]', '5']],
    // devices that are cleaned (nvme-secure-cleanup.txt)
    [
      'live_migratable on a device that is cleaned',
      [{}, { vendor_id: '144d', live_migratable: true }],
      NVME,
      ['nvme.device_spec[1].live_migratable', 'true', 'does not follow a live migration'],
    ],
    [
      'managed false on a device that is cleaned',
      [{ vendor_id: '144d', managed: false }],
      NVME,
      ['nvme.device_spec[0].managed', 'false', 'managed mode'],
    ],
    ['class instance', [new Date(0)], PCI, ['pci.device_spec[0]', 'not an object']],
    // vendor / product
    [
      'non-hex vendor',
      [{}, {}, { vendor_id: '10xz' }],
      PCI,
      ['pci.device_spec[2].vendor_id', '"10xz"', 'hex id'],
    ],
    ['too big vendor', [{ vendor_id: '10000' }], PCI, ['pci.device_spec[0].vendor_id', '"10000"']],
    ['numeric vendor', [{ vendor_id: 8086 }], PCI, ['pci.device_spec[0].vendor_id', '8086', 'quoted']],
    ['empty vendor', [{ vendor_id: '' }], PCI, ['pci.device_spec[0].vendor_id', '""']],
    ['negative vendor', [{ vendor_id: '-1' }], PCI, ['pci.device_spec[0].vendor_id', '"-1"']],
    ['null vendor', [{ vendor_id: null }], PCI, ['pci.device_spec[0].vendor_id', 'null']],
    ['bare 0x', [{ product_id: '0x' }], PCI, ['pci.device_spec[0].product_id', '"0x"']],
    ['wildcard inside an id', [{ product_id: '10*' }], PCI, ['pci.device_spec[0].product_id', '"10*"']],
    // address glob
    ['slot out of range', [{ address: '0000:0a:20.0' }], PCI, ['.address', '"0000:0a:20.0"', 'slot', '1f']],
    ['function out of range', [{ address: '0a:00.8' }], PCI, ['.address', '"0a:00.8"', 'function']],
    ['bus out of range', [{ address: '100:00.0' }], PCI, ['.address', '"100:00.0"', 'bus']],
    ['domain out of range', [{ address: '10000:00:00.0' }], PCI, ['.address', 'domain']],
    [
      'too many fields',
      [{ address: '0:0:0:0.0' }],
      PCI,
      ['pci.device_spec[0].address', '"0:0:0:0.0"', 'at most 3'],
    ],
    ['non-hex part', [{ address: '*:zz:00.0' }], PCI, ['pci.device_spec[0].address', 'bus', '"zz"']],
    ['partial wildcard', [{ address: '0a:0*.0' }], PCI, ['.address', 'slot', '"0*"']],
    ['two dots', [{ address: '0a:00.1.2' }], PCI, ['.address', 'function', '"1.2"']],
    ['blank function', [{ address: '0000:0a:00. ' }], PCI, ['.address', '"0000:0a:00. "', 'blank function']],
    ['number address', [{ address: 5 }], PCI, ['pci.device_spec[0].address', '5']],
    ['list address', [{ address: ['0a'] }], PCI, ['pci.device_spec[0].address', '["0a"]']],
    ['null address', [{ address: null }], PCI, ['pci.device_spec[0].address', 'null']],
    // address regex
    [
      'bad regex',
      [{ address: { bus: '[' } }],
      PCI,
      ['pci.device_spec[0].address.bus', '"["', 'regular expression'],
    ],
    ['unbalanced regex', [{ address: { slot: 'a)|(b' } }], PCI, ['.address.slot', '"a)|(b"']],
    ['regex not a string', [{ address: { function: 3 } }], PCI, ['pci.device_spec[0].address.function', '3']],
    [
      'unknown regex key',
      [{ address: { bsu: '.*' } }],
      PCI,
      ['pci.device_spec[0].address.bsu', '".*"', 'unknown'],
    ],
    // devname
    ['devname with address', [{ devname: 'eth0', address: '0a:00.0' }], PCI, ['[0]', '"eth0"', '"0a:00.0"']],
    // Nova ignores an address Python finds false next to a devname (docs/nova-device-spec.md).
    ['devname with an empty address', [{ devname: 'eth0', address: '' }], PCI, ['[0]', '"eth0"', 'together']],
    ['empty devname', [{ devname: '' }], PCI, ['pci.device_spec[0].devname', '""']],
    ['devname with a slash', [{ devname: '../x' }], PCI, ['pci.device_spec[0].devname', '"../x"']],
    ['devname too long', [{ devname: 'a'.repeat(16) }], PCI, ['pci.device_spec[0].devname']],
    ['devname ..', [{ devname: '..' }], PCI, ['pci.device_spec[0].devname', '".."']],
    ['devname number', [{ devname: 0 }], PCI, ['pci.device_spec[0].devname', '0']],
    // booleans
    ['managed', [{ managed: 'maybe' }], PCI, ['pci.device_spec[0].managed', '"maybe"', 'boolean']],
    ['live_migratable', [{}, { live_migratable: 2 }], PCI, ['pci.device_spec[1].live_migratable', '2']],
    ['one_time_use', [{ one_time_use: null }], PCI, ['pci.device_spec[0].one_time_use', 'null']],
    ['trusted', [{ trusted: 'si' }], PCI, ['pci.device_spec[0].trusted', '"si"']],
    ['remote_managed', [{ remote_managed: [] }], PCI, ['pci.device_spec[0].remote_managed', '[]']],
    [
      'remote_managed maybe',
      [{ remote_managed: 'maybe' }],
      PCI,
      ['pci.device_spec[0].remote_managed', '"maybe"'],
    ],
    // cleanup keys
    [
      'assume_clean',
      [{ assume_clean: 'sure' }],
      NVME,
      ['nvme.device_spec[0].assume_clean', '"sure"', 'boolean'],
    ],
    [
      'assume_clean in pci',
      [{ assume_clean: true }],
      PCI,
      ['pci.device_spec[0].assume_clean', 'true', 'nvme'],
    ],
    [
      'clear_action in pci',
      [{ clear_action: 'zero' }],
      PCI,
      ['pci.device_spec[0].clear_action', '"zero"', 'nvme'],
    ],
    [
      'clear_strategy in pci',
      [{ clear_strategy: 'block' }],
      PCI,
      ['pci.device_spec[0].clear_strategy', '"block"'],
    ],
    [
      'bad clear_action',
      [{ clear_action: 'wipe' }],
      NVME,
      ['nvme.device_spec[0].clear_action', '"wipe"', 'sanitize'],
    ],
    [
      'bad clear_strategy',
      [{ clear_strategy: 7 }],
      NVME,
      ['nvme.device_spec[0].clear_strategy', '7', 'crypto'],
    ],
    [
      'zero with crypto',
      [{}, { clear_action: 'zero', clear_strategy: 'crypto' }],
      NVME,
      ['nvme.device_spec[1]', 'clear_action', '"zero"', 'clear_strategy', '"crypto"'],
    ],
    // placement names
    ['resource_class number', [{ resource_class: 5 }], PCI, ['pci.device_spec[0].resource_class', '5']],
    ['invalid CUSTOM_ class', [{ resource_class: 'CUSTOM_a-b' }], PCI, ['.resource_class', '"CUSTOM_a-b"']],
    ['traits number', [{ traits: 5 }], PCI, ['pci.device_spec[0].traits', '5']],
    ['trait not a string', [{ traits: ['a', 5] }], PCI, ['pci.device_spec[0].traits[1]', '5']],
    ['empty trait in a list', [{ traits: 'a,,b' }], PCI, ['pci.device_spec[0].traits[1]', '""']],
    ['trait too long', [{ traits: ['x'.repeat(249)] }], PCI, ['pci.device_spec[0].traits[0]', 'xxx']],
    ['invalid CUSTOM_ trait', [{ traits: ['CUSTOM_'] }], PCI, ['pci.device_spec[0].traits[0]', '"CUSTOM_"']],
    // attributes
    ['physical_network number', [{ physical_network: 1 }], PCI, ['pci.device_spec[0].physical_network', '1']],
    ['physical_network empty', [{ physical_network: ' ' }], PCI, ['.physical_network', '" "']],
    // unknown keys
    [
      'misspelt key',
      [{}, { vendr_id: '10de' }],
      PCI,
      ['pci.device_spec[1].vendr_id', '"10de"', '"vendor_id"'],
    ],
    [
      'wrong case',
      [{ Product_ID: '10de' }],
      PCI,
      ['pci.device_spec[0].Product_ID', 'did you mean "product_id"'],
    ],
    ['dashes', [{ 'live-migratable': true }], PCI, ['.live-migratable', 'did you mean "live_migratable"']],
    ['unrelated key', [{ colour: 'red' }], PCI, ['pci.device_spec[0].colour', '"red"', 'known keys']],
    [
      '__proto__ key',
      ['{"__proto__": {"managed": "x"}}'],
      PCI,
      ['pci.device_spec[0].__proto__', 'unknown key'],
    ],
  ])('%s', (_name, raw, options, parts) => {
    const error = configError(() => parseDeviceSpecs(raw, options));
    for (const part of parts) expect(error.message).toContain(part);
  });

  it('quotes and shortens strange or huge keys in messages', () => {
    expect(configError(() => parseDeviceSpecs([{ 'a b\n': 1 }], PCI)).message).toContain(
      'pci.device_spec[0]["a b\\n"]: unknown key',
    );
    expect(configError(() => parseDeviceSpecs([{ ['k'.repeat(5000)]: 1 }], PCI)).message.length).toBeLessThan(
      600,
    );
  });

  it('shortens huge values in messages', () => {
    const error = configError(() => parseDeviceSpecs([{ vendor_id: 'z'.repeat(10_000) }], PCI));
    expect(error.message.length).toBeLessThan(300);
  });
});
