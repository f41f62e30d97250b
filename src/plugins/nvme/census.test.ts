/**
 * The census the agent judges NVMe evidence against, on the simulator: what it
 * finds (every allocated namespace, attached or not, with its size; the
 * capacities), when it asks whether namespace management works, and that
 * every way nvme-cli or the host can fail makes it fail, never come back short.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  ADDRESS,
  makeTestHost,
  type TestHost,
  type TestHostOptions,
} from '../../../test/helpers/nvme-host.js';
import { QEMU_NS_MANAGEMENT_FAULTS } from '../../sim/host.js';
import type { CommandRunner } from '../command-runner.js';
import { CensusError, takeNvmeCensus } from './census.js';

const MIB = 1 << 20;

describe('the census of an NVMe device', () => {
  let host: TestHost | undefined;
  afterEach(async () => {
    await host?.dispose();
    host = undefined;
  });

  async function setup(opts: TestHostOptions = {}) {
    host = await makeTestHost({
      namespaces: [
        { nsid: 1, sizeBytes: 2 * MIB },
        { nsid: 2, sizeBytes: MIB, lbaSize: 4096, attached: false },
      ],
      controller: { tnvmcapBytes: 8 * MIB },
      ...opts,
    });
    return host;
  }

  const census = (h: TestHost, over: Partial<Parameters<typeof takeNvmeCensus>[1]> = {}, address = ADDRESS) =>
    takeNvmeCensus(address, {
      sysfsRoot: h.sysfsRoot,
      devRoot: h.devRoot,
      runner: h.runner,
      nvmeCli: h.nvmeCli,
      ...over,
    });

  it('finds every allocated namespace, attached or not, with its size and block size, and the capacities', async () => {
    const h = await setup();
    expect(await census(h)).toEqual({
      controller: 'nvme0',
      totalCapacity: 8 * MIB,
      unallocatedCapacity: 5 * MIB,
      namespaces: [
        { nsid: 1, sizeBytes: 2 * MIB, blockSize: 512, attached: true, name: 'nvme0n1' },
        { nsid: 2, sizeBytes: MIB, blockSize: 4096, attached: false, name: '' },
      ],
      namespaceManagement: 'not-asked',
    });
    const calls = (await h.invocations()).map((i) => i.argv.filter((a) => !a.includes('/')).join(' '));
    expect(calls).toEqual([
      'id-ctrl -o json',
      'list-ns -o json',
      'list-ns --all -o json',
      'id-ns -n 1 --force -o json',
      'id-ns -n 2 --force -o json',
    ]);
  });

  it('asks whether namespace management works only where the coverage depends on it, without changing anything', async () => {
    const h = await setup();
    expect((await census(h, { probe: true })).namespaceManagement).toBe('works');
    const probes = (await h.invocations())
      .filter((i) => i.argv[0] === 'delete-ns')
      .map((i) => i.argv.slice(2));
    expect(probes).toEqual([['-n', '33']]);
    // Nothing unallocated: nothing to ask.
    const full = await makeTestHost({ namespaces: [{ nsid: 1, sizeBytes: MIB }] });
    try {
      expect(
        (
          await takeNvmeCensus(ADDRESS, {
            sysfsRoot: full.sysfsRoot,
            devRoot: full.devRoot,
            runner: full.runner,
            nvmeCli: full.nvmeCli,
            probe: true,
          })
        ).namespaceManagement,
      ).toBe('not-asked');
      expect((await full.invocations()).map((i) => i.argv[0])).not.toContain('delete-ns');
    } finally {
      await full.dispose();
    }
  });

  it('QEMU: capacity "0" is unknown, and namespace management answered Invalid Command Opcode is refused', async () => {
    const h = await setup({ controller: { reportCapacity: false, faults: QEMU_NS_MANAGEMENT_FAULTS } });
    expect(await census(h, { probe: true })).toMatchObject({
      totalCapacity: null,
      unallocatedCapacity: null,
      namespaceManagement: 'refused',
      namespaces: [{ nsid: 1 }, { nsid: 2 }],
    });
  });

  it('without namespace management (OACS bit 3 clear) the active namespaces are all: no --all, no --force, no probe', async () => {
    const h = await setup({
      namespaces: [{ nsid: 1, sizeBytes: 2 * MIB }],
      controller: { oacs: 0x16, tnvmcapBytes: 4 * MIB },
    });
    expect(await census(h, { probe: true })).toMatchObject({
      unallocatedCapacity: 2 * MIB,
      namespaceManagement: 'unsupported',
      namespaces: [{ nsid: 1, sizeBytes: 2 * MIB }],
    });
    const argv = (await h.invocations()).flatMap((i) => i.argv);
    expect(argv).not.toContain('--all');
    expect(argv).not.toContain('--force');
    expect(argv).not.toContain('delete-ns');
  });

  it('through the second controller of a subsystem: a namespace attached only to the first is counted with namespace management, and fails the census without', async () => {
    const namespaces = [
      { nsid: 1, sizeBytes: 2 * MIB },
      { nsid: 2, sizeBytes: MIB, attachedTo: [1] },
    ];
    const second = '0000:02:00.0';
    let h = await setup({ namespaces, subsystem: 0, peers: 1, controller: { tnvmcapBytes: 3 * MIB } });
    expect(await census(h, {}, second)).toMatchObject({
      controller: 'nvme1',
      namespaces: [
        { nsid: 1, attached: true, name: 'nvme0n1' },
        { nsid: 2, attached: false, sizeBytes: MIB },
      ],
    });
    await h.dispose();
    // No namespace management: nvme1 lists nsid 1 only, while the kernel shows nvme0n2 through nvme0.
    h = host = await makeTestHost({
      namespaces,
      subsystem: 0,
      peers: 1,
      controller: { oacs: 0x16, tnvmcapBytes: 3 * MIB },
    });
    await expect(census(h, {}, second)).rejects.toThrow(
      /nvme1: nvme-subsys0 shows nvme0n2 \(nsid 2\), reached through another controller of the subsystem, which nvme1 does not list as allocated \(no namespace management/,
    );
    // Through the first controller the same media is counted whole.
    expect((await census(h)).namespaces.map((n) => n.nsid)).toEqual([1, 2]);
  });

  it("reads 2.3's capacities as strings with the locale's thousands separators", async () => {
    const h = await setup();
    const printed: string[] = [];
    const runner: CommandRunner = {
      async run(file, args, options) {
        const r = await h.runner.run(file, args, options);
        if (args[0] !== 'id-ctrl') return r;
        const stdout = r.stdout
          .replace(`"tnvmcap":"${8 * MIB}"`, '"tnvmcap":"8,388,608"')
          .replace(`"unvmcap":"${5 * MIB}"`, '"unvmcap":"5.242.880"');
        printed.push(stdout);
        return { ...r, stdout };
      },
    };
    expect(await census(h, { runner })).toMatchObject({
      totalCapacity: 8 * MIB,
      unallocatedCapacity: 5 * MIB,
    });
    expect(printed[0]).toContain('"tnvmcap":"8,388,608"');
    expect(printed[0]).toContain('"unvmcap":"5.242.880"');
  });

  it.each([
    [
      'list-ns answers an NVMe error',
      { 'list-ns': { mode: 'error', status: 0x4002 } },
      /nvme list-ns .* failed: NVMe status Invalid Field in Command.*\(0x4002\)/,
    ],
    [
      'id-ns answers an NVMe error',
      { 'id-ns': { mode: 'error', status: 0x400b } },
      /nvme id-ns -n 1 --force -o json on nvme0 failed: NVMe status .*\(0x400b\)/,
    ],
  ] as const)('fails when %s', async (_what, faults, message) => {
    const h = await setup({ controller: { tnvmcapBytes: 8 * MIB, faults } });
    await expect(census(h)).rejects.toThrow(message);
    await expect(census(h)).rejects.toBeInstanceOf(CensusError);
  });

  it('with counters: reads the write counters last, stamped with the controller and its cntlid', async () => {
    const h = await setup({
      controller: {
        tnvmcapBytes: 8 * MIB,
        smart: {
          dataUnitsRead: '0',
          dataUnitsWritten: '77',
          hostReadCommands: '0',
          hostWriteCommands: '12',
          powerCycles: '3',
          powerOnHours: '400',
          unsafeShutdowns: '0',
        },
      },
    });
    const c = await census(h, { counters: true });
    expect(c.writeCounters).toMatchObject({
      controller: 'nvme0',
      cntlid: 1,
      dataUnitsWritten: '77',
      hostWriteCommands: '12',
      powerCycles: '3',
      powerOnHours: '400',
    });
    const calls = (await h.invocations()).map((i) => i.argv.filter((a) => !a.includes('/')).join(' '));
    expect(calls.at(-1)).toBe('smart-log -o json');
    // Without counters asked for, no smart-log at all.
    const before = calls.length;
    expect((await census(h)).writeCounters).toBeUndefined();
    expect((await h.invocations()).slice(before).map((i) => i.argv[0])).not.toContain('smart-log');
  });

  it('with counters: fails closed when the log cannot be read (no clean record without its counters)', async () => {
    const h = await setup({
      controller: { tnvmcapBytes: 8 * MIB, faults: { 'smart-log': { mode: 'error', status: 0x4002 } } },
    });
    await expect(census(h, { counters: true })).rejects.toThrow(
      /nvme smart-log -o json on nvme0 failed: NVMe status .*\(0x4002\)/,
    );
    await expect(census(h, { counters: true })).rejects.toBeInstanceOf(CensusError);
  });

  it('fails when a command hangs past its timeout, when the tool cannot run, and when aborted', async () => {
    const h = await setup({ controller: { tnvmcapBytes: 8 * MIB, faults: { 'id-ns': { mode: 'hang' } } } });
    // Only the hung command gets a short bound here: the others may be slow on a loaded machine.
    const short: CommandRunner = {
      run: (file, args, options) =>
        h.runner.run(file, args, args[0] === 'id-ns' ? { ...options, timeoutMs: 300 } : options),
    };
    await expect(census(h, { runner: short })).rejects.toThrow(/nvme id-ns -n 1 .* did not finish within/);
    await expect(census(h, { nvmeCli: '/nonexistent/nvme' })).rejects.toThrow(
      /'\/nonexistent\/nvme' cannot be run \(ENOENT\)/,
    );
    await expect(census(h, { signal: AbortSignal.abort() })).rejects.toThrow(/aborted/);
  });

  it('fails when what nvme-cli says and what the kernel shows disagree, or an allocated namespace has no size', async () => {
    const h = await setup();
    // sysfs shows a namespace the controller does not list as active.
    await h.builder.setNvmeNamespaces('nvme0', [
      { nsid: 1, sizeBytes: 2 * MIB },
      { nsid: 7, sizeBytes: MIB },
    ]);
    await expect(census(h)).rejects.toThrow(
      /sysfs shows nvme0n7 \(nsid 7\), which nvme list-ns does not list as active/,
    );
    await h.builder.setNvmeNamespaces('nvme0', [{ nsid: 1, sizeBytes: 2 * MIB }]);
    const zeroed: CommandRunner = {
      async run(file, args, options) {
        const r = await h.runner.run(file, args, options);
        return args[0] === 'id-ns' && args.includes('2')
          ? { ...r, stdout: r.stdout.replace(/"nsze":\d+/, '"nsze":0') }
          : r;
      },
    };
    await expect(census(h, { runner: zeroed })).rejects.toThrow(
      /namespace 2 is listed as allocated but id-ns reports no size/,
    );
  });

  it('fails for a function with no controller to ask (a guest still holds it)', async () => {
    const h = await setup();
    await h.builder.setDriver(ADDRESS, 'vfio-pci');
    await expect(census(h)).rejects.toThrow(/no NVMe controller to ask \(bound to vfio-pci, not nvme\)/);
  });
});
