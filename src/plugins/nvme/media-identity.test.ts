/**
 * The NVMe driver's media identity at discovery: the kernel's subsysnqn (the
 * controller's SUBNQN, or the kernel's fallback, also when the kernel ignores a
 * SUBNQN), the serial and model, each namespace's NGUID / EUI-64 / UUID as
 * sysfs shows them (checked against what `nvme id-ns -o json` prints for the
 * same namespace), the PCIe DSN; and that the identity stays known while a
 * guest holds the device (no controller), across an agent restart, but not for
 * another card put at that address.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../../../test/helpers/agent.js';
import { newNvmeDriver } from '../../../test/helpers/nvme-host.js';
import { buildSimHost, type SimHost, type SimNvmeController } from '../../sim/host.js';
import { cliEnvFrom, runCli } from '../../sim/nvme-cli/index.js';
import type { CommandRunner } from '../command-runner.js';
import type { HostContext } from '../driver.js';
import type { DiscoveredDevice } from '../types.js';
import { readNamespaceIdentity } from './media-identity.js';
import type { NvmeKitDriver } from './nvme-driver.js';

const dirs: { cleanup: () => Promise<void> }[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await d.cleanup();
});

const MiB = 1 << 20;

function controller(i: number, extra: Partial<SimNvmeController> = {}): SimNvmeController {
  return {
    address: `0000:0${i + 1}:00.0`,
    vendorId: '144d',
    productId: 'a824',
    controller: `nvme${i}`,
    serial: `SER-${i}`,
    model: 'PM1733 (simulated)',
    caps: { ces: true },
    namespaces: [{ nsid: 1, sizeBytes: MiB }],
    ...extra,
  };
}

async function host(
  nvme: SimNvmeController[],
): Promise<{ sim: SimHost; ctx: HostContext; driver: () => NvmeKitDriver }> {
  const dir = await tempDir('berth-nvme-media-');
  dirs.push(dir);
  const sim = await buildSimHost(join(dir.path, 'h'), {
    host: 'media-host',
    pci: {},
    nvme,
    pciDeviceSpec: [],
    nvmeDeviceSpec: [],
  });
  // nvme-cli 2.3's simulator in this process: the same output without a node start per command.
  const env = cliEnvFrom({ ...process.env, BERTH_NVME_SIM_STATE: sim.nvmeStatePath, LC_ALL: 'C' });
  const runner: CommandRunner = {
    async run(_file, args) {
      return { ...(await runCli([...args], env)), signal: null, timedOut: false, aborted: false };
    },
  };
  const ctx: HostContext = {
    sysfsRoot: sim.sysfsRoot,
    devRoot: sim.devRoot,
    stateDir: sim.stateDir,
    hostname: 'media-host',
    runner,
    logger: pino({ level: 'silent' }),
  };
  const driver = () =>
    newNvmeDriver({ config: { device_spec: [{ vendor_id: '144d' }], nvme_cli: sim.nvmeCli } });
  return { sim, ctx, driver };
}

async function discover(driver: NvmeKitDriver, ctx: HostContext): Promise<Map<string, DiscoveredDevice>> {
  const r = await driver.discover(ctx);
  expect(r.excluded).toEqual([]);
  return new Map(r.devices.map((d) => [d.address, d]));
}

async function idNs(sim: SimHost, dev: string) {
  const r = await runCli(
    ['id-ns', join(sim.devRoot, dev), '-o', 'json'],
    cliEnvFrom({ BERTH_NVME_SIM_STATE: sim.nvmeStatePath, LC_ALL: 'C' }),
  );
  return JSON.parse(r.stdout) as { nguid: string; eui64: string };
}

describe('NVMe media identity at discovery', () => {
  it('keys by the kernel’s subsysnqn: the controller’s SUBNQN, else the kernel’s fallback', async () => {
    const { sim, ctx, driver } = await host([
      controller(0, { subsysnqn: 'nqn.2019-08.org.qemu:SER-0' }),
      controller(1),
      // The kernel ignores this model's SUBNQN (NVME_QUIRK_IGNORE_DEV_SUBNQN): what nvme-cli prints is not the key.
      controller(2, { subsysnqn: 'nqn.2014-08.org.example:same-on-every-unit', ignoreDeviceSubnqn: true }),
    ]);
    const devices = await discover(driver(), ctx);
    const fallback = (serial: string) =>
      `nqn.2014.08.org.nvmexpress:144d144d${serial.padEnd(20)}PM1733 (simulated)`;
    expect(devices.get('0000:01:00.0')?.media).toMatchObject({
      key: 'nvme:nqn.2019-08.org.qemu:SER-0',
      kind: 'NVME_SUBSYSTEM',
      subsystemNqn: 'nqn.2019-08.org.qemu:SER-0',
      serial: 'SER-0',
      model: 'PM1733 (simulated)',
      deviceSerialNumber: '',
    });
    expect(devices.get('0000:02:00.0')?.media?.key).toBe(`nvme:${fallback('SER-1')}`);
    expect(devices.get('0000:03:00.0')?.media?.key).toBe(`nvme:${fallback('SER-2')}`);
    // Each key is exactly what sysfs shows.
    for (const [address, d] of devices) {
      const ctrl = sim.definition.nvme.find((n) => n.address === address)!.controller;
      const nqn = (await readFile(join(sim.sysfsRoot, 'class/nvme', ctrl, 'subsysnqn'), 'utf8')).trim();
      expect(d.media?.subsystemNqn).toBe(nqn);
    }
  });

  it('reads each namespace’s NGUID, EUI-64 and UUID as nvme id-ns prints them', async () => {
    const { sim, ctx, driver } = await host([
      controller(0, {
        namespaces: [
          { nsid: 1, sizeBytes: MiB },
          { nsid: 2, sizeBytes: MiB, nguid: '', eui64: '0025388b0102030a' },
          { nsid: 3, sizeBytes: MiB, uuid: '6f1c2d3e-4a5b-4c6d-8e7f-8091a2b3c4d5' },
          { nsid: 4, sizeBytes: MiB, nguid: '', eui64: '' },
        ],
      }),
    ]);
    const d = (await discover(driver(), ctx)).get('0000:01:00.0')!;
    expect(d.media?.namespaces.map((n) => n.nsid)).toEqual([1, 2, 3, 4]);
    for (const ns of d.media!.namespaces) {
      const id = await idNs(sim, `nvme0n${ns.nsid}`);
      expect(ns.nguid || '0'.repeat(32), `nsid ${ns.nsid}`).toBe(id.nguid);
      expect(ns.eui64 || '0'.repeat(16), `nsid ${ns.nsid}`).toBe(id.eui64);
    }
    expect(d.media!.namespaces[0]!.nguid).toMatch(/^[0-9a-f]{32}$/);
    // Without a UUID the kernel shows the NGUID in `uuid`: that is not a UUID.
    expect(d.media!.namespaces[0]!.uuid).toBe('');
    expect(d.media!.namespaces[2]!.uuid).toBe('6f1c2d3e-4a5b-4c6d-8e7f-8091a2b3c4d5');
    expect(d.media!.namespaces[3]).toEqual({ nsid: 4, nguid: '', eui64: '', uuid: '' });
  });

  it('a kernel that shows only wwid: the identifiers come from it', async () => {
    const { sim, ctx } = await host([controller(0)]);
    const dir = join(sim.sysfsRoot, 'class/block/nvme0n1');
    const full = readNamespaceIdentity(sim.sysfsRoot, 'nvme0n1', 1);
    const { rm } = await import('node:fs/promises');
    for (const f of ['nguid', 'eui', 'uuid']) await rm(join(dir, f));
    expect(readNamespaceIdentity(ctx.sysfsRoot, 'nvme0n1', 1)).toEqual({ ...full, eui64: '' });
    await writeFile(join(dir, 'wwid'), 'eui.0025388b0102030a\n');
    expect(readNamespaceIdentity(ctx.sysfsRoot, 'nvme0n1', 1)).toEqual({
      nsid: 1,
      nguid: '',
      eui64: '0025388b0102030a',
      uuid: '',
    });
    await writeFile(join(dir, 'wwid'), 'nvme.144d-5345522d30-504d31373333-00000001\n');
    expect(readNamespaceIdentity(ctx.sysfsRoot, 'nvme0n1', 1)).toEqual({
      nsid: 1,
      nguid: '',
      eui64: '',
      uuid: '',
    });
    expect(() => readNamespaceIdentity(ctx.sysfsRoot, '../nvme0n1', 1)).toThrow(/not an NVMe namespace/);
  });

  it('carries the function’s PCIe Device Serial Number', async () => {
    const { ctx, driver } = await host([controller(0, { deviceSerialNumber: '00-25-38-ff-fe-00-00-01' })]);
    const d = (await discover(driver(), ctx)).get('0000:01:00.0')!;
    expect(d.media?.deviceSerialNumber).toBe('00-25-38-ff-fe-00-00-01');
  });

  it('keeps the identity while a guest holds the device, across an agent restart; not for another card there', async () => {
    const { sim, ctx, driver } = await host([
      controller(0, { subsysnqn: 'nqn.2019-08.org.qemu:SER-0', deviceSerialNumber: '0000000000000abc' }),
    ]);
    const first = (await discover(driver(), ctx)).get('0000:01:00.0')!;
    expect(first.media?.key).toBe('nvme:nqn.2019-08.org.qemu:SER-0');
    // The guest takes it: vfio-pci, no controller.
    await sim.sysfs.setDriver('0000:01:00.0', 'vfio-pci');
    const held = (await discover(driver(), ctx)).get('0000:01:00.0')!; // a new driver: an agent restart
    expect(held.attributes.nvme_note).toMatch(/no NVMe controller/);
    expect(held.health).toBe('healthy');
    expect(held.media).toEqual(first.media);

    // Another card of the same model in that slot, bound to vfio-pci at boot: another serial, so not the cached identity.
    const drive = await sim.detachNvme('nvme0');
    await sim.insertNvme(
      {
        ...drive,
        definition: { ...drive.definition, deviceSerialNumber: '0000000000000def', driver: 'vfio-pci' },
      },
      { address: '0000:01:00.0' },
    );
    const other = (await discover(driver(), ctx)).get('0000:01:00.0')!;
    expect(other.media).toBeUndefined();
    expect(other.health).toBe('unhealthy');
    expect(other.healthReason).toMatch(/never identified/);
  });

  it('forgets the identity of a function that left the host', async () => {
    const { sim, ctx, driver } = await host([controller(0), controller(1)]);
    const d = driver();
    await discover(d, ctx);
    const file = join(sim.stateDir, 'nvme-identities.json');
    expect(Object.keys(JSON.parse(await readFile(file, 'utf8')))).toEqual(['0000:01:00.0', '0000:02:00.0']);
    const drive = await sim.detachNvme('nvme1');
    await discover(d, ctx);
    expect(Object.keys(JSON.parse(await readFile(file, 'utf8')))).toEqual(['0000:01:00.0']);
    // It comes back bound to vfio-pci: never identified here, so no identity is made up for it.
    await sim.insertNvme(
      { ...drive, definition: { ...drive.definition, driver: 'vfio-pci' } },
      { address: '0000:02:00.0' },
    );
    expect((await discover(d, ctx)).get('0000:02:00.0')?.media).toBeUndefined();
  });
});
