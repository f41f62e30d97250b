/**
 * `berth agent discover` (the operator's dry run) as a user runs it: on the
 * real /sys of this machine against lspci, on a simulated tree, and with a
 * broken configuration (non-zero exit, the error named).
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { buildSimHost, demoHostDefinition, type SimHost } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { available, lspci, realPciDevices } from '../helpers/prerequisites.js';

const run = promisify(execFile);
const BERTH = join(process.cwd(), 'bin/berth');

async function berth(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(BERTH, args, { timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

interface DryRun {
  devices: {
    address: string;
    type: string;
    function_kind: string;
    vendor_id: string;
    product_id: string;
    driver: string;
    cleanup_action: string | null;
  }[];
  excluded: { address: string; driver: string; reason: string }[];
}

const realMachine = 'the dry run on the real /sys against lspci';
const canCompare = available(lspci(), realMachine) && available(realPciDevices(), realMachine);

describe('berth agent discover', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let sim: SimHost;

  beforeAll(async () => {
    dir = await tempDir('berth-discover-');
    sim = await buildSimHost(join(dir.path, 'host'), demoHostDefinition('dry-run-host'));
  });
  afterAll(async () => {
    await dir?.cleanup();
  });

  it.skipIf(!canCompare)('finds on the real /sys exactly what lspci -D -n lists for a vendor', async () => {
    const { stdout: lspci } = await run('lspci', ['-D', '-n'], { timeout: 20_000 });
    const rows = lspci
      .trim()
      .split('\n')
      .map((l) => /^(\S+) [0-9a-f]{4}: ([0-9a-f]{4}):([0-9a-f]{4})/.exec(l))
      .filter((m): m is RegExpExecArray => m !== null);
    const vendor = rows[0]![2]!;
    const expected = rows
      .filter((m) => m[2] === vendor)
      .map((m) => m[1]!)
      .sort();
    const cfg = join(dir.path, 'real.yaml');
    await writeFile(
      cfg,
      JSON.stringify({
        state_dir: join(dir.path, 'state'),
        enabled_drivers: ['pci'],
        // The dry run checks what serve would: an agent without authentication is refused.
        auth: { mode: 'none' },
        pci: { device_spec: [{ vendor_id: vendor }] },
      }),
    );
    const res = await berth(['agent', 'discover', '-c', cfg, '--sysfs-root', '/sys', '-o', 'json']);
    expect(res.code, res.stderr).toBe(0);
    const out = JSON.parse(res.stdout) as DryRun;
    const found = [...out.devices.map((d) => d.address), ...out.excluded.map((e) => e.address)].sort();
    expect(found).toEqual(expected);
    for (const d of out.devices) expect(d.vendor_id).toBe(vendor);
  });

  it('shows devices, locked-in cleanup actions and exclusions on a simulated host', async () => {
    // vendor 8086 without a product also matches the PF, which has VFs enabled.
    const cfg = join(dir.path, 'whole-vendor.yaml');
    const pci = { device_spec: [{ vendor_id: '8086' }, { vendor_id: '10de', managed: false }] };
    await writeFile(cfg, JSON.stringify({ ...sim.agentConfig, pci }));
    const res = await berth(['agent', 'discover', '-c', cfg, '-o', 'json']);
    expect(res.code, res.stderr).toBe(0);
    const out = JSON.parse(res.stdout) as DryRun;
    expect(out.devices).toHaveLength(9);
    expect(out.excluded).toEqual([
      expect.objectContaining({
        address: '0000:3b:00.0',
        driver: 'pci',
        reason: expect.stringMatching(/SR-IOV PF with 4 VFs enabled/),
      }),
    ]);
    const nvme = out.devices.filter((d) => d.driver === 'nvme').map((d) => d.cleanup_action);
    expect(nvme).toEqual(['sanitize-crypto', 'sanitize-block', 'write-zeroes', 'shred']);
    const table = await berth(['agent', 'discover', '-c', cfg]);
    expect(table.code).toBe(0);
    expect(table.stdout).toContain('Excluded (matched by a device_spec entry, not offered):');
    expect(table.stdout).toContain('sanitize-crypto');
  });

  it("writes nothing into the state dir: the running agent's state is not the dry run's", async () => {
    const cfg = join(dir.path, 'read-only.yaml');
    // A state dir that does not exist stays missing.
    const fresh = join(dir.path, 'no-state-yet');
    await writeFile(cfg, JSON.stringify({ ...sim.agentConfig, state_dir: fresh }));
    const first = await berth(['agent', 'discover', '-c', cfg, '-o', 'json']);
    expect(first.code, first.stderr).toBe(0);
    expect(existsSync(fresh)).toBe(false);
    // The running agent's identities (here: one for a device a guest holds, which the
    // dry run cannot identify) are read, and left exactly as they were.
    const kept = join(dir.path, 'agent-state');
    await mkdir(kept);
    const identities = join(kept, 'nvme-identities.json');
    await writeFile(identities, '{}');
    await writeFile(cfg, JSON.stringify({ ...sim.agentConfig, state_dir: kept }));
    const second = await berth(['agent', 'discover', '-c', cfg, '-o', 'json']);
    expect(second.code, second.stderr).toBe(0);
    expect(JSON.parse(second.stdout).devices).toHaveLength(9);
    expect(await readFile(identities, 'utf8')).toBe('{}');
    expect(readdirSync(kept)).toEqual(['nvme-identities.json']);
  });

  it('shows each device’s media identity, and what the agent’s journal says of it, reading the journal only', async () => {
    const cfg = join(dir.path, 'media.yaml');
    const stateDir = join(dir.path, 'media-state');
    await writeFile(cfg, JSON.stringify({ ...sim.agentConfig, state_dir: stateDir }));
    type Media = {
      media: {
        key: string;
        kind: string;
        serial: string;
        namespaces: { nsid: number; nguid: string }[];
      } | null;
      media_record: { condition: string; last_address: string } | null;
    };
    const before = await berth(['agent', 'discover', '-c', cfg, '-o', 'json']);
    expect(before.code, before.stderr).toBe(0);
    const first = JSON.parse(before.stdout).devices as (DryRun['devices'][number] & Media)[];
    const nvme0 = first.find((d) => d.driver === 'nvme')!;
    expect(nvme0.media).toMatchObject({ kind: 'nvme_subsystem', serial: 'SIMDRYRUNHO0' });
    expect(nvme0.media!.key).toMatch(
      /^nvme:nqn\.2014\.08\.org\.nvmexpress:144d144dSIMDRYRUNHO0 +Samsung PM1733/,
    );
    expect(nvme0.media!.namespaces[0]).toMatchObject({
      nsid: 1,
      nguid: expect.stringMatching(/^[0-9a-f]{32}$/),
    });
    expect(first.find((d) => d.vendor_id === '10de')?.media).toMatchObject({ kind: 'pci_slot' });
    // No journal yet: nothing recorded.
    expect(first.every((d) => d.media_record === null)).toBe(true);
    // The agent ran here: its journal's records show, and the journal is left as it was.
    const agent = await Agent.start({
      config: parseAgentConfig(
        { ...sim.agentConfig, state_dir: stateDir, listen: '127.0.0.1:0' },
        {},
        dir.path,
      ),
      bootIdFile: sim.bootIdFile,
    });
    await agent.stop();
    const journal = join(stateDir, 'agent-journal.db');
    const bytes = await readFile(journal);
    const after = await berth(['agent', 'discover', '-c', cfg, '-o', 'json']);
    expect(after.code, after.stderr).toBe(0);
    const again = JSON.parse(after.stdout).devices as (DryRun['devices'][number] & Media)[];
    expect(again.find((d) => d.address === nvme0.address)?.media_record).toMatchObject({
      condition: 'declared_clean',
      last_address: nvme0.address,
    });
    expect((await readFile(journal)).equals(bytes)).toBe(true);
  });

  it('says each exclusion once, in its output, not again as log lines', async () => {
    // clear_action sanitize: the two controllers without sanitize support are excluded by the NVMe driver.
    const cfg = join(dir.path, 'sanitize-only.yaml');
    const nvme = {
      ...(sim.agentConfig.nvme as object),
      device_spec: [{ vendor_id: '144d', clear_action: 'sanitize' }],
    };
    await writeFile(cfg, JSON.stringify({ ...sim.agentConfig, nvme }));
    for (const format of ['table', 'json']) {
      const res = await berth(['agent', 'discover', '-c', cfg, '-o', format]);
      expect(res.code, res.stderr).toBe(0);
      expect(res.stderr).toBe('');
      if (format === 'json') {
        const out = JSON.parse(res.stdout) as DryRun;
        expect(out.excluded.map((e) => [e.address, e.driver])).toEqual([
          ['0000:3f:00.0', 'nvme'],
          ['0000:40:00.0', 'nvme'],
        ]);
        expect(out.devices.find((d) => d.address === '0000:3b:02.0')).toMatchObject({
          type: 'pci',
          function_kind: 'vf',
        });
      } else {
        expect(res.stdout.match(/^0000:3f:00\.0 /gm)).toHaveLength(1);
      }
    }
  });

  it("a vendor driver's own cleanup must satisfy the entry's policy: the others are excluded with the reason", async () => {
    // nvme0 (crypto erase capable) moves to the vendor example under clear_strategy crypto, which its
    // Format SES=1 does not satisfy; nvme1 moves under auto/auto, which it does.
    const cfg = join(dir.path, 'vendor-crypto.yaml');
    const nvme = sim.agentConfig.nvme as Record<string, unknown>;
    await writeFile(
      cfg,
      JSON.stringify({
        ...sim.agentConfig,
        enabled_drivers: ['pci', 'nvme', 'nvme-vendor-example'],
        nvme: { ...nvme, device_spec: [{ address: '0000:3f:00.0' }, { address: '0000:40:00.0' }] },
        'nvme-vendor-example': {
          nvme_cli: nvme.nvme_cli,
          device_spec: [{ address: '0000:3d:00.0', clear_strategy: 'crypto' }, { address: '0000:3e:00.0' }],
        },
      }),
    );
    const res = await berth(['agent', 'discover', '-c', cfg, '-o', 'json']);
    expect(res.code, res.stderr).toBe(0);
    const out = JSON.parse(res.stdout) as DryRun;
    expect(out.excluded).toEqual([
      {
        address: '0000:3d:00.0',
        driver: 'nvme-vendor-example',
        reason: expect.stringMatching(
          /clear_action=auto clear_strategy=crypto \(nvme-vendor-example\.device_spec\[0\]\) asks for what driver nvme-vendor-example's cleanup \(vendor-format-ses1\) does not do; it satisfies auto\/auto, auto\/block/,
        ),
      },
    ]);
    expect(out.devices.find((d) => d.address === '0000:3e:00.0')).toMatchObject({
      driver: 'nvme-vendor-example',
      cleanup_action: 'vendor-format-ses1',
    });
  });

  it('exits non-zero naming the entry, key and value of a bad device_spec', async () => {
    const cfg = join(dir.path, 'bad.yaml');
    await writeFile(
      cfg,
      [
        `sysfs_root: ${sim.sysfsRoot}`,
        `state_dir: ${join(dir.path, 'state')}`,
        'enabled_drivers: [pci]',
        'pci:',
        '  device_spec:',
        '    - {vendor_id: "8086"}',
        '    - {vendor_id: "10de", managed: "perhaps"}',
      ].join('\n'),
    );
    const res = await berth(['agent', 'discover', '-c', cfg, '-o', 'json']);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/configuration error/);
    expect(res.stderr).toContain('pci.device_spec[1]');
    expect(res.stderr).toContain('managed');
    expect(res.stderr).toContain('perhaps');
    expect(res.stdout).toBe('');
  });

  it('exits non-zero when two drivers claim one device', async () => {
    const cfg = join(dir.path, 'dup.yaml');
    await writeFile(
      cfg,
      JSON.stringify({
        ...sim.agentConfig,
        pci: { device_spec: [{ vendor_id: '144d' }] },
      }),
    );
    const res = await berth(['agent', 'discover', '-c', cfg]);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(
      /InvalidConfiguration: PCI device 0000:3d:00.0 is claimed by more than one driver \(pci, nvme\)/,
    );
  });

  it('refuses an unknown top-level key', async () => {
    const cfg = join(dir.path, 'typo.yaml');
    await writeFile(cfg, 'discovery_intervall: 5\n');
    const res = await berth(['agent', 'discover', '-c', cfg]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('discovery_intervall: unknown key');
  });
});
