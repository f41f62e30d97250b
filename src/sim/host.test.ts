/**
 * The simulated host's NVMe identity: sysfs (what the kernel shows) and the
 * nvme-cli simulator (what id-ctrl / id-ns print) say the same of every
 * controller and namespace; and the faults that move media: a drive put back
 * in another slot, or carried to another host, keeps its serial, NQN,
 * namespace identifiers and bytes, and leaves nothing at its old address.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../../test/helpers/agent.js';
import { buildSimHost, demoHostDefinition, type SimHost } from './host.js';
import {
  cliEnvFrom,
  plantTenantData,
  readableTenantData,
  readNvmeSimState,
  runCli,
} from './nvme-cli/index.js';

const dirs: { cleanup: () => Promise<void> }[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await d.cleanup();
});

async function simHost(name: string, busBase = 0x3b): Promise<SimHost> {
  const dir = await tempDir('berth-sim-host-');
  dirs.push(dir);
  const def = demoHostDefinition(name, busBase);
  // One drive reports its own NQN, as QEMU's and enterprise drives do; one namespace only an EUI-64.
  def.nvme[1]!.subsysnqn = `nqn.2019-08.org.qemu:${def.nvme[1]!.serial}`;
  def.nvme[2]!.namespaces = [{ nsid: 1, sizeBytes: 1 << 20, nguid: '', eui64: '0025388b0102030a' }];
  return buildSimHost(join(dir.path, name), def);
}

const sysfsText = (h: SimHost, rel: string) =>
  readFile(join(h.sysfsRoot, rel), 'utf8')
    .then((t) => t.trim())
    .catch(() => null);

async function nvme(h: SimHost, ...argv: string[]) {
  const r = await runCli(argv, cliEnvFrom({ BERTH_NVME_SIM_STATE: h.nvmeStatePath, LC_ALL: 'C' }));
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

describe('a simulated host’s NVMe identity', () => {
  it('sysfs and nvme-cli agree: the NQN, and each namespace’s NGUID and EUI-64', async () => {
    const h = await simHost('ident-host');
    for (const n of h.definition.nvme) {
      const nqn = await sysfsText(h, `class/nvme/${n.controller}/subsysnqn`);
      const id = await nvme(h, 'id-ctrl', join(h.devRoot, n.controller), '-o', 'json');
      if (n.subsysnqn) {
        // The controller's own SUBNQN, as id-ctrl prints it and the kernel shows it.
        expect(id.subnqn).toBe(n.subsysnqn);
        expect(nqn).toBe(n.subsysnqn);
      } else {
        // None reported: nvme-cli omits the field, the kernel builds its fallback from the ids, serial and model.
        expect(id).not.toHaveProperty('subnqn');
        expect(nqn).toBe(`nqn.2014.08.org.nvmexpress:144d144d${String(id.sn)}${String(id.mn)}`.trimEnd());
      }
      const ns = `class/nvme/${n.controller}/${n.controller}n1`;
      const idNs = await nvme(h, 'id-ns', join(h.devRoot, `${n.controller}n1`), '-o', 'json');
      const nguid = (await sysfsText(h, `${ns}/nguid`))?.replaceAll('-', '') ?? '0'.repeat(32);
      const eui = (await sysfsText(h, `${ns}/eui`))?.replaceAll(' ', '') ?? '0'.repeat(16);
      expect(idNs.nguid, n.controller).toBe(nguid);
      expect(idNs.eui64, n.controller).toBe(eui);
      const wwid = await sysfsText(h, `${ns}/wwid`);
      expect(wwid).toBe(/^0+$/.test(nguid) ? `eui.${eui}` : `eui.${nguid}`);
    }
  });

  it('a drive put back in another slot: the same serial, NQN, namespaces and bytes; nothing left at the old address', async () => {
    const h = await simHost('move-host');
    const before = h.definition.nvme.find((n) => n.controller === 'nvme1')!;
    const oldAddress = before.address;
    const nqn = await sysfsText(h, 'class/nvme/nvme1/subsysnqn');
    const nguid = await sysfsText(h, 'class/nvme/nvme1/nvme1n1/nguid');
    await plantTenantData(h.nvmeStatePath, 'nvme1', [{ where: 0, at: 0.5, length: 4096 }]);
    const planted = await readableTenantData(h.nvmeStatePath, 'nvme1');
    expect(planted).toHaveLength(1);

    await h.moveNvme('nvme1', '0000:06:00.0');

    expect(await sysfsText(h, `bus/pci/devices/${oldAddress}/vendor`)).toBeNull();
    expect(await sysfsText(h, 'class/nvme/nvme1/address')).toBe('0000:06:00.0');
    expect(await sysfsText(h, 'class/nvme/nvme1/serial')).toBe(before.serial);
    expect(await sysfsText(h, 'class/nvme/nvme1/subsysnqn')).toBe(nqn);
    expect(await sysfsText(h, 'class/nvme/nvme1/nvme1n1/nguid')).toBe(nguid);
    expect(h.definition.nvme.find((n) => n.controller === 'nvme1')?.address).toBe('0000:06:00.0');
    const state = await readNvmeSimState(h.nvmeStatePath);
    expect(state.controllers.find((c) => c.name === 'nvme1')?.pciAddress).toBe('0000:06:00.0');
    // The tenant's bytes went with it.
    expect(await readableTenantData(h.nvmeStatePath, 'nvme1')).toEqual(planted);
    const id = await nvme(h, 'id-ctrl', join(h.devRoot, 'nvme1'), '-o', 'json');
    expect(String(id.sn).trim()).toBe(before.serial);
  });

  it('a drive carried to another host, under another controller name: its media and identity go with it', async () => {
    const a = await simHost('carry-a');
    const b = await simHost('carry-b', 0x50);
    const nqn = await sysfsText(a, 'class/nvme/nvme2/subsysnqn');
    await plantTenantData(a.nvmeStatePath, 'nvme2', [{ where: 0, at: 0.1, length: 4096 }]);
    const drive = await a.detachNvme('nvme2');
    expect(a.definition.nvme.map((n) => n.controller)).not.toContain('nvme2');
    expect(await sysfsText(a, 'class/nvme/nvme2/serial')).toBeNull();
    await b.insertNvme(drive, { address: '0000:70:00.0', controller: 'nvme7' });
    expect(await sysfsText(b, 'class/nvme/nvme7/subsysnqn')).toBe(nqn);
    expect(await sysfsText(b, 'class/nvme/nvme7/serial')).toBe(drive.definition.serial);
    const found = await readableTenantData(b.nvmeStatePath, 'nvme7');
    expect(found).toEqual([`${join(b.devRoot, 'nvme7n1')}@${Math.floor(0.1 * ((1 << 20) - 4096))}`]);
    // Its namespace is a block device on the new host, by its new name.
    const idNs = await nvme(b, 'id-ns', join(b.devRoot, 'nvme7n1'), '-o', 'json');
    expect(idNs.eui64).toBe('0025388b0102030a');
    // Two drives cannot take one name or one slot.
    const other = await b.detachNvme('nvme0');
    await expect(b.insertNvme(other, { address: '0000:71:00.0', controller: 'nvme7' })).rejects.toThrow(
      /nvme7/,
    );
  });

  it('a dual-port drive: both controllers show the subsystem’s NQN, serial and namespace identifiers, in sysfs and nvme-cli; it is not moved by one port', async () => {
    const dir = await tempDir('berth-sim-host-');
    dirs.push(dir);
    const MIB = 1 << 20;
    const port = (controller: string, address: string, cntlid: number) => ({
      address,
      vendorId: '144d',
      productId: 'a824',
      controller,
      cntlid,
      subsystem: 0,
      caps: { nsManagement: true },
      namespaces: [] as { nsid: number; sizeBytes: number; attachedTo?: number[] }[],
    });
    const quirky = { model: 'Quirky Dual Port', subsysnqn: 'nqn.2014-08.org.example:same-on-every-unit' };
    for (const [name, identity] of [
      ['own-nqn', { model: 'Dual Port', subsysnqn: 'nqn.2026-01.example:dual-port' }],
      ['fallback', { model: 'Dual Port' }],
      ['quirk', { ...quirky, ignoreDeviceSubnqn: true }],
    ] as const) {
      const h = await buildSimHost(join(dir.path, name), {
        host: name,
        pci: {},
        nvme: [
          {
            ...port('nvme0', '0000:01:00.0', 1),
            serial: 'DUAL-0001',
            ...identity,
            namespaces: [
              { nsid: 1, sizeBytes: MIB },
              { nsid: 2, sizeBytes: MIB, attachedTo: [1] },
            ],
          },
          // The second port's own serial and model are not the subsystem's: the kernel shows the subsystem's.
          { ...port('nvme1', '0000:02:00.0', 2), serial: 'IGNORED', model: 'Ignored' },
        ],
        pciDeviceSpec: [],
        nvmeDeviceSpec: [{ vendor_id: '144d' }],
      });
      const expected =
        'subsysnqn' in identity && !('ignoreDeviceSubnqn' in identity)
          ? identity.subsysnqn
          : `nqn.2014.08.org.nvmexpress:144d144dDUAL-0001           ${identity.model}`;
      const nqns = await Promise.all(
        [
          'class/nvme/nvme0/subsysnqn',
          'class/nvme/nvme1/subsysnqn',
          'class/nvme-subsystem/nvme-subsys0/subsysnqn',
        ].map((p) => sysfsText(h, p)),
      );
      expect(nqns, name).toEqual([expected, expected, expected]);
      expect(await sysfsText(h, 'class/nvme/nvme1/serial'), name).toBe('DUAL-0001');
      const list = (await nvme(h, 'list', '-v', '-o', 'json')) as {
        Devices: { Subsystems: { SubsystemNQN: string; Controllers: { Controller: string }[] }[] }[];
      };
      const [subsys] = list.Devices[0]!.Subsystems;
      expect(subsys!.SubsystemNQN.trimEnd(), name).toBe(expected);
      expect(subsys!.Controllers.map((c) => c.Controller)).toEqual(['nvme0', 'nvme1']);
      // id-ctrl prints the SUBNQN the controller reports, through either port, and none when it reports none.
      for (const c of ['nvme0', 'nvme1']) {
        const id = await nvme(h, 'id-ctrl', join(h.devRoot, c), '-o', 'json');
        expect(id.subnqn, `${name} ${c}`).toBe('subsysnqn' in identity ? identity.subsysnqn : undefined);
        expect(String(id.sn).trim()).toBe('DUAL-0001');
      }
      // One namespace, one set of identifiers: sysfs's head and nvme-cli through each port agree.
      const head = (await sysfsText(h, 'class/block/nvme0n1/nguid'))!.replaceAll('-', '');
      for (const c of ['nvme0', 'nvme1']) {
        const idNs = await nvme(h, 'id-ns', join(h.devRoot, c), '-n', '1', '-o', 'json');
        expect(idNs.nguid, `${name} ${c}`).toBe(head);
      }
      // Namespace 2 is reached through nvme0 only, and its head is the subsystem's.
      expect(await sysfsText(h, 'class/block/nvme0c0n2/nsid')).toBe('2');
      expect(await sysfsText(h, 'class/block/nvme0c1n2/nsid')).toBeNull();
      await expect(h.moveNvme('nvme1', '0000:06:00.0'), name).rejects.toThrow(
        /nvme1 is one of 2 controllers of NVM subsystem 0 on .*: only a drive with one controller can be moved/,
      );
    }
  });
});
