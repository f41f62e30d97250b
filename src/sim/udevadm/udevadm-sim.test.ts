/**
 * The simulated udevadm as the agent runs it: the wrapper a simulated host
 * writes, the events of the sysfs builder's changes in the kernel's order,
 * only those after it started, and an exit when the agent's end of its stdin
 * closes.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../../../test/helpers/agent.js';
import { parseUeventLine } from '../../server/agent/uevent.js';
import { buildSysfs } from '../sysfs/index.js';
import { writeUdevadmWrapper } from './wrapper.js';

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
});

const dir = await tempDir('berth-udevadm-sim-');
afterAll(() => dir.cleanup());

function run(udevadm: string, args: string[]) {
  const child = spawn(udevadm, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (c: string) => {
    out += c;
  });
  child.stderr!.setEncoding('utf8').on('data', (c: string) => {
    err += c;
  });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const until = async (test: (s: string) => boolean) => {
    while (!test(out)) {
      await new Promise<void>((resolve, reject) => {
        child.stdout!.once('data', () => resolve());
        child.once('exit', () => reject(new Error(`udevadm-sim exited: ${err}${out}`)));
      });
    }
    return out;
  };
  return { child, until, exited, stderr: () => err };
}

const events = (text: string) =>
  text
    .split('\n')
    .map(parseUeventLine)
    .filter((e) => e !== null)
    .map((e) => `${e.action} ${e.devpath} ${e.subsystem}`);

describe('udevadm-sim', () => {
  it('prints the builder’s events after its header, in the kernel’s order, filtered by subsystem', async () => {
    const log = join(dir.path, 'a.log');
    const sysfs = await buildSysfs(
      join(dir.path, 'a'),
      {
        functions: [{ address: '0000:05:00.0', vendorId: '8086', productId: '10fb', driver: 'ixgbe' }],
        pfs: [
          {
            address: '0000:3b:00.0',
            vendorId: '8086',
            productId: '1572',
            driver: 'i40e',
            totalVfs: 4,
            vf: { productId: '154c', driver: 'iavf' },
          },
        ],
      },
      { ueventLog: log },
    );
    // A change before it starts is not printed (the netlink socket was not bound yet).
    await sysfs.setDriver('0000:05:00.0', 'vfio-pci');
    const udevadm = await writeUdevadmWrapper(join(dir.path, 'bin'), log);
    const m = run(udevadm, [
      'monitor',
      '--kernel',
      '--subsystem-match=pci',
      '--subsystem-match=nvme',
      '--subsystem-match=block',
    ]);
    await m.until((s) => s.endsWith('\n\n'));
    await sysfs.addNvmeController({
      address: '0000:06:00.0',
      vendorId: '144d',
      productId: 'a808',
      controller: 'nvme0',
      namespaces: [{ nsid: 1, sizeBytes: 1 << 20 }],
    });
    await sysfs.setNumVfs('0000:3b:00.0', 1);
    await sysfs.removeFunction('0000:06:00.0');
    const out = await m.until((s) => s.includes('remove   /devices/pci0000:00/0000:06:00.0 (pci)'));
    expect(events(out)).toEqual([
      // As a QEMU hotplug of an NVMe controller shows it on Linux 6.1 (test/vm).
      'add /devices/pci0000:00/0000:06:00.0 pci',
      'add /devices/pci0000:00/0000:06:00.0/nvme/nvme0 nvme',
      'bind /devices/pci0000:00/0000:06:00.0 pci',
      'change /devices/pci0000:00/0000:06:00.0/nvme/nvme0 nvme',
      'add /devices/pci0000:00/0000:06:00.0/nvme/nvme0/nvme0n1 block',
      'add /devices/pci0000:00/0000:3b:02.0 pci',
      'bind /devices/pci0000:00/0000:3b:02.0 pci',
      'remove /devices/pci0000:00/0000:06:00.0/nvme/nvme0/nvme0n1 block',
      'remove /devices/pci0000:00/0000:06:00.0/nvme/nvme0 nvme',
      'unbind /devices/pci0000:00/0000:06:00.0 pci',
      'remove /devices/pci0000:00/0000:06:00.0 pci',
    ]);
    // Its stdin is the agent's end: closed, it exits.
    m.child.stdin!.end();
    expect(await m.exited).toBe(0);
  }, 120_000);

  it('answers a bad command line as udevadm does, and needs its log', async () => {
    const udevadm = await writeUdevadmWrapper(join(dir.path, 'bin-b'), join(dir.path, 'b.log'));
    const bad = run(udevadm, ['monitor', '--bogus']);
    expect(await bad.exited).toBe(1);
    expect(bad.stderr()).toBe("monitor: unrecognized option '--bogus'\n");
    const verb = run(udevadm, ['trigger']);
    expect(await verb.exited).toBe(1);
    expect(verb.stderr()).toBe('Unknown command verb trigger.\n');
    const noLog = spawn(join(process.cwd(), 'bin/udevadm-sim'), ['monitor'], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, BERTH_UDEVADM_SIM_LOG: '' },
    });
    let err = '';
    noLog.stderr!.on('data', (c: Buffer) => {
      err += c;
    });
    expect(await new Promise((r) => noLog.on('exit', r))).toBe(1);
    expect(err).toMatch(/BERTH_UDEVADM_SIM_LOG names no event log/);
  }, 120_000);
});
