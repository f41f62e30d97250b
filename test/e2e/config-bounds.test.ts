/**
 * Configuration values that used to break the process, each
 * refused at parse time with a configuration error naming the key and the value
 * — through `berth agent discover`, the operator's dry run, which exits 2 — and
 * none of them a stack trace:
 * - durations past Node's timer limit (2^31-1 ms: they fired every 1 ms) or of a
 *   nanosecond (a busy loop);
 * - driver names that are Object.prototype's (`__proto__`, `valueOf`, …), which
 *   crashed with "builtin is not a function";
 * - a NUL in a string (it reached a sysfs path later), a 200,000-way regex;
 * - a missing sysfs_root, which made the dry run report 0 devices.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { MAX_TIMER_MS } from '../../src/config-schema.js';
import { ConfigError } from '../../src/errors.js';
import {
  CLEANUP_TIMEOUT_RANGE,
  POLL_INTERVAL_RANGE,
  parseNvmeConfig,
} from '../../src/plugins/nvme/config.js';
import { DURATION_RANGES, parseAgentConfig } from '../../src/server/agent/config.js';
import { buildSimHost, demoHostDefinition, type SimHost } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv } from '../helpers/berth-cli.js';

describe('config values that broke the process are configuration errors', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let sim: SimHost;
  let n = 0;

  beforeAll(async () => {
    dir = await tempDir('berth-bounds-');
    sim = await buildSimHost(join(dir.path, 'host'), demoHostDefinition('bounds-host'));
  });
  afterAll(async () => {
    await dir?.cleanup();
  });

  /** The simulated host's config with `change` applied, through the dry run. */
  async function dryRun(change: (doc: Record<string, unknown>) => void, yamlText?: string) {
    const doc = structuredClone(sim.agentConfig);
    change(doc);
    const file = join(dir.path, `agent-${n++}.yaml`);
    await writeFile(file, yamlText ?? toYaml(doc));
    return berth(['agent', 'discover', '-c', file, '-o', 'json'], cliEnv(join(dir.path, 'client.yaml')));
  }

  const nvme = (doc: Record<string, unknown>) => doc.nvme as Record<string, unknown>;

  it('the unchanged simulated host is fine (the baseline of every case below)', async () => {
    const r = await dryRun(() => {});
    expect(r.code, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as { devices: unknown[] }).devices).toHaveLength(9);
  });

  it.each([
    [
      'discovery_interval',
      1e12,
      /discovery_interval: expected a number of seconds in \[0\.1, 86400\], got 1000000000000/,
    ],
    [
      'register_interval',
      1e12,
      /register_interval: expected a number of seconds in \[0\.1, 3600\], got 1000000000000/,
    ],
    [
      'discovery_interval',
      1e-9,
      /discovery_interval: expected a number of seconds in \[0\.1, 86400\], got 1e-9/,
    ],
  ])('%s: %s', async (key, value, message) => {
    const r = await dryRun((doc) => {
      doc[key] = value;
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it.each([
    [
      'cleanup_timeout',
      1e12,
      /nvme\.cleanup_timeout: 1000000000000 is not a whole number of seconds in \[1, 604800\]/,
    ],
    ['poll_interval', 1e-9, /nvme\.poll_interval: 1e-9 is not a number of seconds in \[0\.01, 3600\]/],
  ])('nvme.%s: %s', async (key, value, message) => {
    const r = await dryRun((doc) => {
      nvme(doc)[key] = value;
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });

  it('every documented range stays within what Node timers hold', () => {
    for (const [, max] of [...Object.values(DURATION_RANGES), CLEANUP_TIMEOUT_RANGE, POLL_INTERVAL_RANGE]) {
      expect(max * 1000).toBeLessThanOrEqual(MAX_TIMER_MS);
    }
    // The edges are accepted.
    const cfg = parseAgentConfig({ discovery_interval: 86_400, register_interval: 0.1 });
    expect([cfg.discoveryInterval, cfg.registerInterval]).toEqual([86_400, 0.1]);
    expect(parseNvmeConfig('nvme', { cleanup_timeout: 604_800, poll_interval: 0.01 })).toMatchObject({
      cleanupTimeoutMs: 604_800_000,
      pollIntervalMs: 10,
    });
  });

  it.each(['__proto__', 'hasOwnProperty', 'valueOf', 'constructor', 'toString'])(
    'enabled_drivers: [%s] cannot be loaded, and says so',
    async (name) => {
      const r = await dryRun((doc) => {
        doc.enabled_drivers = ['pci', name];
        delete doc.nvme;
      });
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`berth: configuration error:`);
      expect(r.stderr).toContain(
        `enabled_drivers: cannot load driver ${JSON.stringify(name)} (built-in drivers: pci, nvme`,
      );
      expect(r.stderr).not.toMatch(/is not a function|\n\s+at /);
    },
  );

  it('a __proto__ key is refused wherever it is', () => {
    const doc = JSON.parse('{"pci": {"device_spec": [{"__proto__": {"managed": false}}]}}');
    expect(() => parseAgentConfig(doc)).toThrow(
      new ConfigError('pci.device_spec[0].__proto__: not a configuration key'),
    );
  });

  it('a NUL in devname (or in any string, an external driver section included) is refused at parse time', async () => {
    const r = await dryRun(
      () => {},
      `${toYaml({ ...sim.agentConfig, pci: { device_spec: [{ devname: 'X' }] } })}`.replace(
        'devname: X',
        'devname: "eth\\0x"',
      ),
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/pci\.device_spec\[0\]\.devname: "eth\\u0000x" contains a NUL character/);
    expect(() =>
      parseAgentConfig({ enabled_drivers: ['./acme.js'], acme: { tool: { path: '/opt/acme\0/bin' } } }),
    ).toThrow(/^acme\.tool\.path: "\/opt\/acme\\u0000\/bin" contains a NUL character$/);
    expect(() => parseAgentConfig({ state_dir: '/var/lib/\0' })).toThrow(
      /^state_dir: .* contains a NUL character/,
    );
  });

  it('a 200,000-way alternation as an address regex is refused at parse time', async () => {
    const alternation = Array.from({ length: 200_000 }, (_, i) =>
      (i % 256).toString(16).padStart(2, '0'),
    ).join('|');
    const r = await dryRun((doc) => {
      doc.pci = { device_spec: [{ address: { bus: alternation } }] };
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /pci\.device_spec\[0\]\.address\.bus: "00\|01\|[^"]*…" is 599999 characters long; a field's regular expression may have at most 256/,
    );
  });

  it('a missing sysfs_root is a configuration error, not a dry run with 0 devices', async () => {
    const missing = join(dir.path, 'no-such-sys');
    const r = await dryRun((doc) => {
      doc.sysfs_root = missing;
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(
      `sysfs_root: ${JSON.stringify(missing)} is not a sysfs tree (it has no bus/pci/devices directory)`,
    );
    expect(r.stdout).toBe('');
    // A directory that is not sysfs (an empty one) is refused the same way.
    const empty = join(dir.path, 'empty-sys');
    await mkdir(empty);
    const e = await dryRun((doc) => {
      doc.sysfs_root = empty;
    });
    expect(e.code).toBe(2);
    expect(e.stderr).toContain('is not a sysfs tree');
  });
});
