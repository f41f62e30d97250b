/**
 * discovery: Berth's full PCI discovery + device_spec match on a large
 * simulated host versus `lspci` reading the same tree.
 *
 * Host: largeHostSpec({pfs:16, vfsPerPf:256, nvme:256}) built under /dev/shm
 * (4,368 functions). Berth: PciDriver.discover through PluginHost (the path the
 * agent runs: read every function, match 20 device_spec entries, IOMMU group
 * checks, sort). Only the pci driver is enabled, so no `nvme id-ctrl` runs —
 * the NVMe functions are read and matched as plain PCI functions.
 * Baseline: `lspci -D -n -A linux-sysfs -O sysfs.path=<root>/bus/pci`, which
 * reads the same sysfs attributes and config space of every function.
 * Each side runs several times, interleaved; the medians are compared.
 * Goal: ratio (berth / lspci) <= 1.0.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { pino } from 'pino';
import { ExecRunner } from '../src/plugins/exec-runner.js';
import { parseAgentConfig } from '../src/server/agent/config.js';
import { PluginHost } from '../src/server/agent/plugin-host.js';
import { buildSysfs, largeHostSpec } from '../src/sim/sysfs/index.js';
import { emit, median, nowMs, parseArgs, tempDir, timed } from './lib.js';

const run = promisify(execFile);

/**
 * 20 entries in the spirit of a real fleet's nova.conf: most name hardware
 * this host does not have (so every function is tried against them), then
 * globs, a regex, a devname and a PF address that covers its VFs.
 */
export const DEVICE_SPEC: unknown[] = [
  { vendor_id: '10de', product_id: '25b6', managed: false },
  { vendor_id: '10de', product_id: '2236' },
  { vendor_id: '15b3', product_id: '101e' },
  { vendor_id: '15b3', product_id: '1018' },
  { vendor_id: '1af4', product_id: '1041' },
  { vendor_id: '1002', product_id: '*' },
  { vendor_id: '8086', product_id: '0d58' },
  { address: '0001:*:*.*' },
  { address: 'ff:1f.7' },
  { address: { domain: '0002', bus: '.*', slot: '.*', function: '[0-7]' } },
  { vendor_id: '8086', product_id: '1889', address: '0000:30:*.*' },
  { devname: 'ens0f0', live_migratable: true },
  { address: '0000:12:00.0', traits: ['gold'] },
  { address: { bus: '1[4-9a-f]', function: '[0-7]' }, vendor_id: '8086', product_id: '154c' },
  { address: '0000:20:*.*', vendor_id: '8086', product_id: '154c' },
  { address: { bus: '2[0-9a-f]' }, vendor_id: '8086' },
  { vendor_id: '144d', product_id: 'a808', address: '0000:30:*.*' },
  { vendor_id: '144d', product_id: 'a808', resource_class: 'nvme_raw' },
  { vendor_id: '8086', product_id: '154c' },
  { vendor_id: '*', product_id: '*', address: '0000:00:1f.*' },
];

async function main() {
  const { quick } = parseArgs();
  const spec = quick ? largeHostSpec({ pfs: 4, vfsPerPf: 32, nvme: 16 }) : largeHostSpec();
  const runs = quick ? 3 : 9;
  const base = existsSync('/dev/shm') ? '/dev/shm' : '/tmp';
  const dir = await tempDir(base, 'berth-bench-discovery-');
  try {
    const sysfsRoot = join(dir.path, 'sys');
    const build = await timed(() => buildSysfs(sysfsRoot, spec));
    const config = parseAgentConfig(
      {
        host: 'bench-host',
        listen: '127.0.0.1:0',
        sysfs_root: sysfsRoot,
        dev_root: join(dir.path, 'dev'),
        state_dir: join(dir.path, 'state'),
        enabled_drivers: ['pci'],
        pci: { device_spec: DEVICE_SPEC },
      },
      {},
      dir.path,
    );
    const host = await PluginHost.load(config, {
      sysfsRoot,
      devRoot: config.devRoot,
      stateDir: config.stateDir,
      hostname: config.host,
      runner: new ExecRunner(),
      logger: pino({ level: 'silent' }),
    });
    const lspciArgs = ['-D', '-n', '-A', 'linux-sysfs', '-O', `sysfs.path=${sysfsRoot}/bus/pci`];
    let lspciAvailable = true;
    try {
      await run('lspci', ['--version']);
    } catch {
      lspciAvailable = false;
    }
    // One warm-up of each side (JIT, dentry cache), not counted.
    const first = await timed(() => host.discover({ strict: true }));
    let lspciLines = 0;
    if (lspciAvailable) {
      const out = await run('lspci', lspciArgs, { maxBuffer: 64 << 20 });
      lspciLines = out.stdout.split('\n').filter(Boolean).length;
    }
    const berthMs: number[] = [];
    const lspciMs: number[] = [];
    let devices = first.value.devices.length;
    let excluded = first.value.excluded.length;
    const deadline = nowMs() + (quick ? 15_000 : 120_000);
    for (let i = 0; i < runs && nowMs() < deadline; i++) {
      // Alternate which side goes first so drift in machine load hits both.
      const sides = i % 2 === 0 ? ['berth', 'lspci'] : ['lspci', 'berth'];
      for (const side of sides) {
        if (side === 'berth') {
          const r = await timed(() => host.discover({ strict: true }));
          berthMs.push(r.ms);
          devices = r.value.devices.length;
          excluded = r.value.excluded.length;
        } else if (lspciAvailable) {
          const r = await timed(() => run('lspci', lspciArgs, { maxBuffer: 64 << 20 }));
          lspciMs.push(r.ms);
        }
      }
    }
    const value = median(berthMs);
    const baseline = lspciAvailable ? median(lspciMs) : Number.NaN;
    const ratio = value / baseline;
    emit({
      name: 'discovery',
      value,
      baseline,
      ratio,
      goal: 'median berth discovery / median lspci <= 1.0',
      pass: ratio <= 1.0,
      unit: 'ms',
      functions: lspciLines,
      devices,
      excluded,
      device_spec_entries: DEVICE_SPEC.length,
      runs: berthMs.length,
      berth_ms: berthMs.map((x) => Math.round(x)),
      lspci_ms: lspciMs.map((x) => Math.round(x)),
      first_discovery_ms: Math.round(first.ms),
      sysfs_build_ms: Math.round(build.ms),
      sysfs_base: base,
      note: `pci driver only: NVMe functions matched as PCI functions, no nvme id-ctrl${lspciAvailable ? '' : '; lspci not found, no baseline'}`,
      quick,
    });
  } finally {
    await dir.cleanup();
  }
}

await main();
