import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import { parseNvmeConfig } from './config.js';

describe('parseNvmeConfig', () => {
  it('applies the defaults', () => {
    expect(parseNvmeConfig('nvme', {})).toEqual({
      entries: [],
      cleanupTimeoutMs: 900_000,
      nvmeCli: 'nvme',
      pollIntervalMs: 5000,
      verify: 'full',
    });
  });

  it('reads every key; poll_interval may be a fraction of a second', () => {
    const c = parseNvmeConfig('nvme', {
      device_spec: [{ vendor_id: '144d', clear_action: 'sanitize' }],
      cleanup_timeout: 60,
      nvme_cli: '/usr/sbin/nvme',
      poll_interval: 0.05,
      verify: 'Sample',
    });
    expect(c).toMatchObject({
      cleanupTimeoutMs: 60_000,
      nvmeCli: '/usr/sbin/nvme',
      pollIntervalMs: 50,
      verify: 'sample',
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
    [{ shred: '/usr/bin/shred' }, /nvme\.shred: no longer used/],
    [{ verify: 'some' }, /nvme\.verify: "some" is not one of full, sample/],
    [{ verify: true }, /nvme\.verify: true is not one of/],
    [{ device_spec: [{ clear_action: 'zero', clear_strategy: 'crypto' }] }, /clear/],
  ])('rejects %o', (config, message) => {
    expect(() => parseNvmeConfig('nvme', config)).toThrow(ConfigError);
    expect(() => parseNvmeConfig('nvme', config)).toThrow(message);
  });
});
