import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import { parseNvmeConfig } from './config.js';
import { parseShredLine, ShredProgressParser } from './shred-progress.js';

describe('parseNvmeConfig', () => {
  it('applies the defaults', () => {
    expect(parseNvmeConfig('nvme', {})).toEqual({
      entries: [],
      cleanupTimeoutMs: 900_000,
      nvmeCli: 'nvme',
      pollIntervalMs: 5000,
      shred: 'shred',
    });
  });

  it('reads every key; poll_interval may be a fraction of a second', () => {
    const c = parseNvmeConfig('nvme', {
      device_spec: [{ vendor_id: '144d', clear_action: 'sanitize' }],
      cleanup_timeout: 60,
      nvme_cli: '/usr/sbin/nvme',
      poll_interval: 0.05,
      shred: '/usr/bin/shred',
    });
    expect(c).toMatchObject({
      cleanupTimeoutMs: 60_000,
      nvmeCli: '/usr/sbin/nvme',
      pollIntervalMs: 50,
      shred: '/usr/bin/shred',
    });
    expect(c.entries[0]).toMatchObject({ vendorId: '144d', clearAction: 'sanitize', clearStrategy: 'auto' });
  });

  it.each([
    [{ cleanup_timout: 5 }, /nvme\.cleanup_timout: unknown key/],
    [{ cleanup_timeout: 0 }, /nvme\.cleanup_timeout: 0 is not a whole number of seconds in \[1, 604800\]/],
    [{ cleanup_timeout: 1.5 }, /nvme\.cleanup_timeout: 1\.5 is not/],
    [{ cleanup_timeout: 'soon' }, /nvme\.cleanup_timeout: "soon" is not/],
    [{ poll_interval: -1 }, /nvme\.poll_interval: -1 is not/],
    [{ nvme_cli: '' }, /nvme\.nvme_cli: "" is not a program/],
    [{ shred: 42 }, /nvme\.shred: 42 is not a program/],
    [{ device_spec: [{ clear_action: 'zero', clear_strategy: 'crypto' }] }, /clear/],
  ])('rejects %o', (config, message) => {
    expect(() => parseNvmeConfig('nvme', config)).toThrow(ConfigError);
    expect(() => parseNvmeConfig('nvme', config)).toThrow(message);
  });
});

describe('shred progress', () => {
  it('parses the verbose lines (C locale)', () => {
    expect(parseShredLine('shred: /dev/sdb: pass 1/1 (000000)...15MiB/29MiB 51%')).toEqual({
      pass: 1,
      passes: 1,
      bytesDone: 15 * 1024 ** 2,
      bytesTotal: 29 * 1024 ** 2,
      percent: 51,
    });
    expect(parseShredLine('shred: /dev/sdb: pass 1/1 (000000)...')).toMatchObject({
      percent: null,
      bytesDone: null,
    });
    expect(parseShredLine('shred: /dev/sdb: No space left on device')).toBeNull();
  });

  it('reassembles lines split across chunks', () => {
    const seen: (number | null)[] = [];
    const p = new ShredProgressParser((x) => seen.push(x.percent));
    p.push('shred: /dev/x: pass 1/1 (000000)...1.5GiB/3GiB 5');
    p.push('0%\nshred: /dev/x: pass 1/1 (000000)...3GiB/3GiB 100%');
    p.end();
    expect(seen).toEqual([50, 100]);
  });
});
