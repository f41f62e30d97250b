/**
 * `berth demo` end to end, as a user first runs it: no `berth up` answers at
 * the configured endpoint, so the demo starts its own in-process, runs every
 * step and exits 0 only when each did what it should.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv } from '../helpers/berth-cli.js';
import { freePort } from '../helpers/processes.js';

describe('berth demo', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;

  beforeAll(async () => {
    dir = await tempDir('berth-demo-test-');
  });
  afterAll(async () => {
    await dir?.cleanup();
  });

  it('runs the whole lifecycle on its own berth up and exits 0', async () => {
    // Nothing listens on the configured endpoint: the demo must start its own.
    const closed = await freePort();
    const env = cliEnv(join(dir.path, 'client-config.yaml'), { BERTH_ENDPOINT: `127.0.0.1:${closed}` });
    const started = Date.now();
    const r = await berth(['demo'], env, 170_000);
    const out = r.stdout;
    expect(r.code, `${out}\n${r.stderr}`).toBe(0);
    expect(out).toMatch(/No Berth scheduler answers at 127\.0\.0\.1:\d+; starting one here/);
    for (const step of [
      'Discovery',
      'Profiles',
      'Accelerator requests',
      'The guest XML',
      'Device-role metadata',
      'Deleting',
      'Live migration',
      'One-time use',
      'A cleanup that fails',
    ]) {
      expect(out).toContain(step);
    }
    expect(out).toMatch(/sim-host-1 has 9 devices/);
    expect(out).toMatch(/cleanup sanitize-crypto/);
    expect(out).toContain("<hostdev mode='subsystem' type='pci' managed='yes'>");
    expect(out).toMatch(/passthrough on pci 0000:00:1[0-9a-f]\.0, tags scratch/);
    expect(out).toMatch(/Planned: sim-host-1\/0000:3b:02\.\d -> sim-host-2\/0000:5b:02\.\d/);
    expect(out).toMatch(/burned=true, allocatable=false, reserved=1/);
    expect(out).toMatch(/The operator released it: burned=false, allocatable=true/);
    // Progress is plain lines on a pipe: a failed sanitize, then the re-clean succeeding.
    expect(out).toMatch(/phase=failed percent=\d+ .*sanitize failed/);
    expect(out.match(/phase=succeeded percent=100/g)?.length).toBeGreaterThanOrEqual(2);
    expect(out).toMatch(/is in error .*still reserved/);
    expect(out).toMatch(/All 9 steps did what they should/);
    expect(out).not.toContain('FAILED at step');
    // The temporary state directory it made is gone.
    const dirLine = /state in (\S+)\)/.exec(out)?.[1];
    expect(dirLine).toBeDefined();
    const { existsSync } = await import('node:fs');
    expect(existsSync(dirLine!)).toBe(false);
    // "well under two minutes" on an idle machine; the bound here allows for a loaded one.
    expect(Date.now() - started).toBeLessThan(170_000);
  }, 180_000);
});
