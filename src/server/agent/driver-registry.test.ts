import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import { DRIVER_API_VERSION } from '../../plugins/driver.js';
import { BUILTIN_DRIVERS, loadDriver } from './driver-registry.js';

const FIXTURES = join(process.cwd(), 'test/fixtures/drivers');

/** A logger that keeps what was warned. */
function warnings() {
  const lines: { obj: Record<string, unknown>; msg: string }[] = [];
  return {
    lines,
    logger: {
      warn: (obj: object, msg: string) => void lines.push({ obj: obj as Record<string, unknown>, msg }),
    },
  };
}

describe('loadDriver', () => {
  it('loads the built-in drivers as API 3 definitions, without a word; cleaning follows the capability', async () => {
    const w = warnings();
    const loaded = await Promise.all(
      Object.keys(BUILTIN_DRIVERS).map((name) => loadDriver(name, {}, '/base', { logger: w.logger })),
    );
    expect(
      loaded.map((l) => [l.driver.name, l.driver.apiVersion, l.driver.supportsCleaning, l.source]),
    ).toEqual([
      ['pci', DRIVER_API_VERSION, false, 'builtin'],
      ['nvme', DRIVER_API_VERSION, true, 'builtin'],
      ['nvme-vendor-example', DRIVER_API_VERSION, true, 'builtin'],
    ]);
    expect(loaded.map((l) => typeof l.driver.cleanup)).toEqual(['undefined', 'function', 'function']);
    expect(w.lines).toEqual([]);
  });

  it('hands a definition its section parsed and typed, and names the section key in a mistake', async () => {
    await expect(loadDriver('nvme', { poll_interval: 'soon' }, '/base', { key: 'nvme' })).rejects.toThrow(
      /^nvme\.poll_interval: "soon" is not a number of seconds/,
    );
    const err = await loadDriver('nvme-vendor-example', { device_spec: 'all' }, '/base', {
      key: 'acme',
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/^acme\.device_spec\[0\]: "all" /);
  });

  it('loads a driver API 2 class, adapted, with one deprecation line naming the package and the version', async () => {
    const w = warnings();
    const entry = join(FIXTURES, 'pci-copy.ts');
    const l = await loadDriver(entry, {}, '/base', { logger: w.logger });
    expect([l.driver.name, l.driver.apiVersion, l.driver.supportsCleaning]).toEqual(['pci-copy', '2', false]);
    // A v2 driver that does not say it cleans has no cleanup capability, whatever its class inherits.
    expect(l.driver.cleanup).toBeUndefined();
    expect(w.lines).toEqual([
      {
        obj: { driver: 'pci-copy', entry, apiVersion: '2' },
        msg:
          `driver package ${JSON.stringify(entry)} uses driver API version 2, deprecated: it loads until version 4; ` +
          'rewrite it as a defineDriver definition (API 3, docs/drivers.md)',
      },
    ]);
  });

  it('keeps a v2 driver that says it cleans but never implemented cleanup failing closed', async () => {
    const l = await loadDriver(join(FIXTURES, 'forgetful.ts'), {}, '/base');
    expect(l.driver.supportsCleaning).toBe(true);
    await expect(
      l.driver.cleanup!(
        { address: '0000:01:00.0' } as Parameters<NonNullable<typeof l.driver.cleanup>>[0],
        {} as never,
      ),
    ).rejects.toThrow(/says it cleans 0000:01:00.0 but does not implement cleanup\(\): nothing was scrubbed/);
  });

  it('calls a driver that is a class instance on itself, and gives it no capability it lacks', async () => {
    const l = await loadDriver(join(FIXTURES, 'class-instance.ts'), {}, '/base');
    expect([l.driver.supportsCleaning, l.driver.cleanup, l.driver.initHost]).toEqual([
      false,
      undefined,
      undefined,
    ]);
    const ctx = {} as Parameters<typeof l.driver.discover>[0];
    await l.driver.discover(ctx);
    expect((await l.driver.discover(ctx)).excluded[0]!.reason).toBe('pass 2');
  });

  it('refuses a definition for another major version, and a module that exports no driver', async () => {
    await expect(loadDriver(join(FIXTURES, 'future-api.ts'), {}, '/base')).rejects.toThrow(
      /was written for driver API version "4.0"; this agent speaks version 3 \(and 2, deprecated\)/,
    );
    await expect(loadDriver(join(process.cwd(), 'src/plugins/driver.ts'), {}, '/base')).rejects.toThrow(
      /does not export a driver \(default export or `Driver`\)/,
    );
  });
});
