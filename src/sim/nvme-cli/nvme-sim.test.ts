/**
 * End-to-end tests of bin/nvme-sim run as a child process, as the agent runs it
 * (through the wrapper written by writeNvmeWrapper), against temp state dirs.
 */
import { execFile, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, watch, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { available, REAL_NVME, realNvmeCli } from '../../../test/helpers/prerequisites.js';
import { sleep, waitFor } from '../../../test/helpers/wait.js';
import { createNvmeSimState, type NvmeSimSpec, readNvmeSimState, writeNvmeWrapper } from './index.js';

const haveRealNvme = available(realNvmeCli(), 'the comparisons of simulator errors with the real nvme-cli');

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

interface Sim {
  root: string;
  nvme: string;
  state: string;
  dev: (name: string) => string;
  run: (args: string[], env?: NodeJS.ProcessEnv) => Promise<{ stdout: string; stderr: string; code: number }>;
}

async function makeSim(spec: (dev: (n: string) => string) => NvmeSimSpec): Promise<Sim> {
  const root = mkdtempSync(join(tmpdir(), 'nvme-sim-'));
  dirs.push(root);
  const dev = (n: string) => join(root, 'dev', n);
  const state = join(root, 'state.json');
  await createNvmeSimState(state, spec(dev));
  const nvme = await writeNvmeWrapper(join(root, 'bin'), state);
  const run = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    new Promise<{ stdout: string; stderr: string; code: number }>((resolve) => {
      execFile(nvme, args, { env: { ...process.env, LC_ALL: 'C', ...env } }, (err, stdout, stderr) => {
        const code = err ? ((err as { code?: number }).code ?? -1) : 0;
        resolve({ stdout, stderr, code: typeof code === 'number' ? code : -1 });
      });
    });
  return { root, nvme, state, dev, run };
}

const MiB = 1 << 20;

function pattern(size: number, byte: number): Buffer {
  return Buffer.alloc(size, byte);
}

describe('nvme-sim executable', () => {
  it('id-ctrl -o json has 2.3 quirks: int32 sanicap, string tnvmcap, padded sn/mn/fr', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme0',
          devPath: dev('nvme0'),
          sanicap: 0xa0000003,
          sn: '1951B3444502',
          tnvmcapBytes: 256060514304,
          namespaces: [{ nsid: 1, sizeBytes: MiB }],
        },
      ],
    }));
    const r = await sim.run(['id-ctrl', sim.dev('nvme0'), '--output-format=json']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('"sanicap":-1610612733,\n');
    expect(r.stdout).toContain('"tnvmcap":"256060514304",\n');
    const j = JSON.parse(r.stdout);
    expect(j.sn).toBe('1951B3444502        ');
    expect(j.mn).toHaveLength(40);
    expect(j.fr).toHaveLength(8);
    expect(j.sanicap >>> 0).toBe(0xa0000003);
    expect(typeof j.unvmcap).toBe('string');
    // The namespace block device works for id-ctrl too, and id-ns reports LBAs + string nvmcap.
    const ns = JSON.parse((await sim.run(['id-ns', sim.dev('nvme0n1'), '-o', 'json'])).stdout);
    expect(ns).toMatchObject({ nsze: 2048, ncap: 2048, flbas: 0, nvmcap: String(MiB) });
    expect(ns.lbafs[0]).toEqual({ ms: 0, ds: 9, rp: 2 });
    // list -v -o json maps the controller to its PCI address and namespaces.
    const tree = JSON.parse((await sim.run(['list', '-v', '-o', 'json'])).stdout);
    expect(tree.Devices[0].Subsystems[0].Controllers[0]).toMatchObject({
      Controller: 'nvme0',
      Address: '0000:01:00.0',
      Transport: 'pcie',
      Namespaces: [expect.objectContaining({ NameSpace: 'nvme0n1', NSID: 1 })],
    });
    // On the controller without -n: NVME_IOCTL_ID fails, as with the real tool.
    const noNsid = await sim.run(['id-ns', sim.dev('nvme0'), '-o', 'json']);
    expect(noNsid).toMatchObject({
      code: 1,
      stdout: '',
      stderr: 'get-namespace-id: Inappropriate ioctl for device\n',
    });
  });

  it('sanitize runs in the background: in progress, then done, data replaced; a second one is refused', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme0',
          devPath: dev('nvme0'),
          namespaces: [{ nsid: 1, sizeBytes: MiB }],
          sanitize: { durationMs: 6000 },
        },
      ],
    }));
    const data = sim.dev('nvme0n1');
    writeFileSync(data, pattern(MiB, 0xa5));
    const start = await sim.run(['sanitize', sim.dev('nvme0'), '-a', 'start-crypto-erase']);
    expect(start).toEqual({ code: 0, stdout: '', stderr: '' });

    const log1 = JSON.parse((await sim.run(['sanitize-log', sim.dev('nvme0'), '-o', 'json'])).stdout);
    expect(Object.keys(log1)).toEqual(['nvme0']);
    expect(log1.nvme0.sstat.status).toBe('(2) Sanitize in Progress.');
    expect(log1.nvme0.sprog).toBeGreaterThan(0);
    expect(log1.nvme0.sprog).toBeLessThan(65536);
    expect(log1.nvme0.cdw10_info).toBe(4);
    expect(log1.nvme0.time_over_write).toBe(-1);

    const again = await sim.run(['sanitize', sim.dev('nvme0'), '-a', '4']);
    expect(again).toEqual({
      code: 1,
      stdout: '',
      stderr:
        'NVMe status: Sanitize In Progress: The requested function is prohibited while a sanitize operation is in progress(0x1d)\n',
    });
    const wz = await sim.run(['write-zeroes', data, '-c', '0']);
    expect(wz.code).toBe(1);
    expect(wz.stderr).toMatch(/\(0x1d\)\n$/);
    // Still the old data while the sanitize runs.
    expect(readFileSync(data).equals(pattern(MiB, 0xa5))).toBe(true);

    let log = log1;
    for (let i = 0; i < 40 && log.nvme0.sstat.status.startsWith('(2)'); i++) {
      await sleep(500);
      log = JSON.parse(
        (await sim.run(['sanitize-log', data, '-o', 'json'])).stdout.replace('"nvme0n1"', '"nvme0"'),
      );
    }
    expect(log.nvme0.sstat).toEqual({
      global_erased: 1,
      no_cmplted_passes: 0,
      status: '(1) Most Recent Sanitize Command Completed Successfully.',
    });
    expect(log.nvme0.sprog).toBe(65535);
    const after = readFileSync(data);
    expect(after.length).toBe(MiB);
    expect(after.includes(pattern(64, 0xa5))).toBe(false);
    expect(after.equals(Buffer.alloc(MiB))).toBe(false); // crypto erase: random, not zeroes
  }, 60_000);

  it('the detached worker completes a block erase even if nobody polls', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme3',
          devPath: dev('nvme3'),
          namespaces: [{ nsid: 1, sizeBytes: MiB }],
          sanitize: { durationMs: 1500 },
        },
      ],
    }));
    const data = sim.dev('nvme3n1');
    writeFileSync(data, pattern(MiB, 0x5a));
    expect((await sim.run(['sanitize', sim.dev('nvme3'), '--sanact=2'])).code).toBe(0);
    let st = await readNvmeSimState(sim.state);
    for (let i = 0; i < 40 && (st.controllers[0]?.sanitize.sstat ?? 0) !== 0x101; i++) {
      await sleep(250);
      st = await readNvmeSimState(sim.state);
    }
    expect(st.controllers[0]?.sanitize.sstat).toBe(0x101);
    expect(readFileSync(data).equals(Buffer.alloc(MiB))).toBe(true);
  }, 30_000);

  it('sanitize-fails fault: status 3, data left in place, media commands then fail with 0x1c', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme0',
          devPath: dev('nvme0'),
          namespaces: [{ nsid: 1, sizeBytes: MiB }],
          sanitize: { durationMs: 0 },
          faults: { sanitize: { mode: 'sanitize-fails' } },
        },
      ],
    }));
    const data = sim.dev('nvme0n1');
    writeFileSync(data, pattern(MiB, 0x3c));
    // SANICAP 0x3 has no overwrite (OWS): the controller refuses the action.
    const ows = await sim.run(['sanitize', sim.dev('nvme0'), '-a', 'start-overwrite']);
    expect(ows.stderr).toMatch(/^NVMe status: Invalid Field in Command: .*\(0x4002\)\n$/);
    expect((await sim.run(['sanitize', sim.dev('nvme0'), '-a', '2'])).code).toBe(0);
    const log = JSON.parse((await sim.run(['sanitize-log', sim.dev('nvme0'), '-o', 'json'])).stdout);
    expect(log.nvme0.sstat.status).toBe('(3) Most Recent Sanitize Command Failed.');
    expect(log.nvme0.sstat.global_erased).toBe(0);
    expect(readFileSync(data).equals(pattern(MiB, 0x3c))).toBe(true);
    const wz = await sim.run(['write-zeroes', data, '-c', '0']);
    expect(wz.stderr).toBe(
      'NVMe status: Sanitize Failed: The most recent sanitize operation failed and no recovery action has been successfully completed(0x1c)\n',
    );
  }, 30_000);

  it('write-zeroes zeroes exactly the requested LBAs; range and count errors match 2.3', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme1',
          devPath: dev('nvme1'),
          namespaces: [{ nsid: 1, sizeBytes: MiB, lbaSize: 4096 }],
        },
      ],
    }));
    const data = sim.dev('nvme1n1');
    writeFileSync(data, pattern(MiB, 0xee));
    // -c is 0-based: 3 → 4 LBAs at 10..13; then one LBA at 200 using prefixes and single-dash long options.
    const a = await sim.run(['write-zeroes', data, '-n', '1', '-s', '10', '-c', '3']);
    expect(a).toEqual({ code: 0, stdout: 'NVME Write Zeroes Success\n', stderr: '' });
    const b = await sim.run(['write-zeroes', '-namespace-id=1', '--start-b', '200', '-block-count=0', data]);
    expect(b.stdout).toBe('NVME Write Zeroes Success\n');
    const buf = readFileSync(data);
    for (let lba = 0; lba < 256; lba++) {
      const block = buf.subarray(lba * 4096, (lba + 1) * 4096);
      const zero = (lba >= 10 && lba <= 13) || lba === 200;
      expect(block.equals(zero ? Buffer.alloc(4096) : pattern(4096, 0xee)), `lba ${lba}`).toBe(true);
    }
    const oob = await sim.run(['write-zeroes', data, '-s', '255', '-c', '1']);
    expect(oob).toEqual({
      code: 1,
      stdout: '',
      stderr:
        'NVMe status: LBA Out of Range: The command references an LBA that exceeds the size of the namespace(0x4080)\n',
    });
    const big = await sim.run(['write-zeroes', data, '-c', '65536']);
    expect(big).toEqual({
      code: 1,
      stdout: '',
      stderr: "Expected short argument for 'block-count' but got '65536'!\n",
    });
    if (haveRealNvme) {
      const r = spawnSync(REAL_NVME, ['write-zeroes', data, '-c', '65536'], { encoding: 'utf8' });
      expect(big.stderr).toBe(r.stderr);
    }
  }, 30_000);

  it('namespace management: delete all, create, attach without -c (warning, no change), attach, capacity', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme0',
          devPath: dev('nvme0'),
          cntlid: 5,
          tnvmcapBytes: 8 * MiB,
          namespaces: [
            { nsid: 1, sizeBytes: 2 * MiB },
            { nsid: 2, sizeBytes: 2 * MiB },
          ],
        },
      ],
    }));
    const ctrl = sim.dev('nvme0');
    writeFileSync(sim.dev('nvme0n1'), pattern(2 * MiB, 0x77));
    expect((await sim.run(['delete-ns', ctrl, '-n', '0xFFFFFFFF'])).stdout).toBe(
      'delete-ns: Success, deleted nsid:-1\n',
    );
    expect(existsSync(sim.dev('nvme0n1'))).toBe(false);
    expect(JSON.parse((await sim.run(['list', '-o', 'json'])).stdout)).toEqual({ Devices: [] });

    const tooBig = await sim.run(['create-ns', ctrl, '--nsze=20000', '--ncap=20000', '--flbas=0']);
    expect(tooBig.stderr).toBe(
      'NVMe status: Namespace Insufficient Capacity: Creating the namespace requires more free space than is currently available(0x4115)\n',
    );
    const created = await sim.run([
      'create-ns',
      ctrl,
      '--nsze=16384',
      '--ncap=16384',
      '--flbas=0',
      '--dps=0',
    ]);
    expect(created).toEqual({ code: 0, stdout: 'create-ns: Success, created nsid:1\n', stderr: '' });
    expect(statSync(sim.dev('nvme0n1')).size).toBe(16384 * 512);
    // No deallocation on create (the pessimistic controller): the deleted namespace's bytes show again.
    expect(readFileSync(sim.dev('nvme0n1')).includes(pattern(16, 0x77))).toBe(true);

    const noList = await sim.run(['attach-ns', ctrl, '-n', '1']);
    expect(noList).toEqual({
      code: 0,
      stdout: 'attach-ns: Success, nsid:1\n',
      stderr: 'warning: empty controller-id list will result in no actual change in namespace attachment\n',
    });
    expect(JSON.parse((await sim.run(['list-ns', ctrl, '-o', 'json'])).stdout)).toEqual({ nsid_list: [] });
    expect(JSON.parse((await sim.run(['list-ns', ctrl, '--all', '-o', 'json'])).stdout)).toEqual({
      nsid_list: [{ nsid: 1 }],
    });
    const wrongCtrl = await sim.run(['attach-ns', ctrl, '--namespace-id=1', '--controllers=1']);
    expect(wrongCtrl.stderr).toMatch(/^NVMe status: Controller List Invalid: .*\(0x411c\)\n$/);
    expect((await sim.run(['attach-ns', ctrl, '--namespace-id=1', '--controllers=5'])).stdout).toBe(
      'attach-ns: Success, nsid:1\n',
    );
    expect(await sim.run(['ns-rescan', ctrl])).toEqual({ code: 0, stdout: '', stderr: '' });
    const list = JSON.parse((await sim.run(['list', '-o', 'json'])).stdout);
    expect(list.Devices).toEqual([
      expect.objectContaining({
        NameSpace: 1,
        DevicePath: sim.dev('nvme0n1'),
        MaximumLBA: 16384,
        SectorSize: 512,
      }),
    ]);
    // Detached, the namespace's block device is gone (ENOENT) although its data file remains.
    expect((await sim.run(['detach-ns', ctrl, '-n', '1', '-c', '5'])).stdout).toBe(
      'detach-ns: Success, nsid:1\n',
    );
    const gone = await sim.run(['id-ns', sim.dev('nvme0n1'), '-o', 'json']);
    expect(gone.stderr.startsWith(`${sim.dev('nvme0n1')}: No such file or directory\n`)).toBe(true);
    expect(existsSync(sim.dev('nvme0n1'))).toBe(true);
  }, 60_000);

  it('unknown device path: perror text and help, exactly like the real tool', async () => {
    const sim = await makeSim(() => ({ controllers: [] }));
    const r = await sim.run(['sanitize-log', '/dev/nvme9', '-o', 'json']);
    expect(r.code).toBe(1);
    expect(
      r.stderr.startsWith('/dev/nvme9: No such file or directory\n\x1b[1mUsage: nvme sanitize-log'),
    ).toBe(true);
    if (haveRealNvme) {
      const real = spawnSync(REAL_NVME, ['sanitize-log', '/dev/nvme9', '-o', 'json'], {
        encoding: 'utf8',
      });
      expect(r).toEqual({ code: real.status, stdout: real.stdout, stderr: real.stderr });
    }
  }, 30_000);

  it('error fault prints the libnvme status line; hang fault never returns until killed', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme0',
          devPath: dev('nvme0'),
          namespaces: [{ nsid: 1, sizeBytes: MiB }],
          faults: { 'id-ctrl': { mode: 'error', status: 0x4002 }, 'sanitize-log': { mode: 'hang' } },
        },
      ],
    }));
    expect(await sim.run(['id-ctrl', sim.dev('nvme0'), '-o', 'json'])).toEqual({
      code: 1,
      stdout: '',
      stderr:
        'NVMe status: Invalid Field in Command: A reserved coded value or an unsupported value in a defined field(0x4002)\n',
    });
    // The hung command meets its fault under the state lock: once it has taken
    // the lock and let it go, a command that was not going to hang exits at once.
    const lock = `${sim.state}.lock`;
    let lockChanges = 0;
    const watcher = watch(dirname(lock), (_event, name) => {
      if (name === basename(lock)) lockChanges++;
    });
    const child = spawn(sim.nvme, ['sanitize-log', sim.dev('nvme0'), '-o', 'json'], { stdio: 'ignore' });
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on('exit', (code, signal) => resolve({ code, signal })),
    );
    try {
      await waitFor(() => lockChanges >= 2, 15_000, 'the hung command to take and release the state lock');
    } finally {
      watcher.close();
    }
    // A witness: a whole invocation started after that runs to its end — and
    // finds the state unlocked — while the hung one is still there.
    expect((await sim.run(['list-ns', sim.dev('nvme0'), '-o', 'json'])).code).toBe(0);
    expect({ code: child.exitCode, signal: child.signalCode }).toEqual({ code: null, signal: null });
    child.kill('SIGTERM');
    expect(await exited).toEqual({ code: null, signal: 'SIGTERM' });
  }, 30_000);

  it('concurrent invocations serialize on the state lock (no lost updates)', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [{ name: 'nvme0', devPath: dev('nvme0'), tnvmcapBytes: 64 * MiB, namespaces: [] }],
    }));
    const ctrl = sim.dev('nvme0');
    const results = await Promise.all([
      ...[0, 1, 2, 3].map(() => sim.run(['create-ns', ctrl, '-s', '2048', '-c', '2048', '-b', '512'])),
      sim.run(['sanitize-log', ctrl, '-o', 'json']),
    ]);
    for (const r of results) expect(r.code).toBe(0);
    const nsids = results
      .slice(0, 4)
      .map((r) => Number(/created nsid:(\d+)/.exec(r.stdout)?.[1]))
      .sort();
    expect(nsids).toEqual([1, 2, 3, 4]);
    const st = await readNvmeSimState(sim.state);
    expect(st.controllers[0]?.namespaces.map((n) => n.nsid)).toEqual([1, 2, 3, 4]);
    expect(existsSync(`${sim.state}.lock`)).toBe(false);
  }, 60_000);

  it('format: without --force warns and waits; SES 1 zeroes, SES 2 randomizes; needs OACS bit 1', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        { name: 'nvme0', devPath: dev('nvme0'), namespaces: [{ nsid: 1, sizeBytes: MiB }] },
        { name: 'nvme1', devPath: dev('nvme1'), oacs: 0x8, namespaces: [{ nsid: 1, sizeBytes: MiB }] },
      ],
    }));
    const data = sim.dev('nvme0n1');
    writeFileSync(data, pattern(MiB, 0x11));
    const warned = await sim.run(['format', data, '-s', '1'], { BERTH_NVME_SIM_FAST: '1' });
    expect(warned).toEqual({
      code: 0,
      stdout: 'Success formatting namespace:1\n',
      stderr:
        'You are about to format nvme0n1, namespace 0x1.\n' +
        "WARNING: Format may irrevocably delete this device's data.\n" +
        'You have 10 seconds to press Ctrl-C to cancel this operation.\n\n' +
        'Use the force [--force] option to suppress this warning.\n' +
        'Sending format operation ... \n',
    });
    expect(readFileSync(data).equals(Buffer.alloc(MiB))).toBe(true);
    writeFileSync(data, pattern(MiB, 0x11));
    // `-f` is an unambiguous prefix of --force under getopt_long_only.
    expect((await sim.run(['format', sim.dev('nvme0'), '-n', '1', '--ses=2', '-f'])).stdout).toBe(
      'Success formatting namespace:1\n',
    );
    const after = readFileSync(data);
    expect(after.includes(pattern(64, 0x11)) || after.equals(Buffer.alloc(MiB))).toBe(false);
    const noFormat = await sim.run(['format', sim.dev('nvme1'), '-n', '1', '-s', '1', '--force']);
    expect(noFormat.stderr).toMatch(/^NVMe status: Invalid Command Opcode: .*\(0x4001\)\n$/);
  }, 60_000);

  it('models what the issue needs: GDE cleared by any write, skipped ranges, unallocated media, capacity "0"', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme0',
          devPath: dev('nvme0'),
          tnvmcapBytes: 4 * MiB,
          namespaces: [{ nsid: 1, sizeBytes: 2 * MiB }],
          sanitize: { durationMs: 0 },
          faults: { 'write-zeroes': { mode: 'skip-range', offset: 4096, length: 1024 } },
        },
        {
          name: 'nvme1',
          devPath: dev('nvme1'),
          reportCapacity: false,
          namespaces: [{ nsid: 1, sizeBytes: MiB }],
        },
      ],
    }));
    const ctrl = sim.dev('nvme0');
    const data = sim.dev('nvme0n1');
    const gde = async () =>
      JSON.parse((await sim.run(['sanitize-log', ctrl, '-o', 'json'])).stdout).nvme0.sstat.global_erased;
    expect(await sim.run(['sanitize', ctrl, '-a', '2'])).toMatchObject({ code: 0 });
    expect(await gde()).toBe(1);
    // A tenant's write through the block device (the file) clears Global Data Erased, as the spec says any write does.
    await sleep(20);
    writeFileSync(data, pattern(2 * MiB, 0x5e));
    expect(await gde()).toBe(0);

    // skip-range: success text, every block zeroed except the skipped bytes.
    expect((await sim.run(['write-zeroes', data, '-s', '0', '-c', '4095'])).stdout).toBe(
      'NVME Write Zeroes Success\n',
    );
    const after = readFileSync(data);
    expect(after.subarray(0, 4096).every((b) => b === 0)).toBe(true);
    expect(after.subarray(4096, 5120).every((b) => b === 0x5e)).toBe(true);
    expect(after.subarray(5120).every((b) => b === 0)).toBe(true);

    // Unallocated media: a deleted namespace's bytes stay; a new namespace over them shows them; sanitize erases them.
    writeFileSync(data, pattern(2 * MiB, 0x6f));
    await sim.run(['delete-ns', ctrl, '-n', '1']);
    const state = await readNvmeSimState(sim.state);
    const media = state.controllers[0]!.mediaPath!;
    expect(
      readFileSync(media)
        .subarray(0, 2 * MiB)
        .equals(pattern(2 * MiB, 0x6f)),
    ).toBe(true);
    await sim.run(['create-ns', ctrl, '--nsze=8192', '--ncap=8192', '--flbas=0']);
    expect(readFileSync(data).equals(pattern(4 * MiB, 0).fill(0x6f, 0, 2 * MiB))).toBe(true);
    await sim.run(['delete-ns', ctrl, '-n', '1']);
    expect(await sim.run(['sanitize', ctrl, '-a', '2'])).toMatchObject({ code: 0 });
    await sim.run(['sanitize-log', ctrl, '-o', 'json']);
    expect(readFileSync(media).every((b) => b === 0)).toBe(true);

    // QEMU reports its capacity as "0".
    const id = JSON.parse((await sim.run(['id-ctrl', sim.dev('nvme1'), '-o', 'json'])).stdout);
    expect([id.tnvmcap, id.unvmcap]).toEqual(['0', '0']);
  }, 60_000);
  it('two controllers of one NVM subsystem share its namespaces, media and sanitize', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme0',
          devPath: dev('nvme0'),
          cntlid: 1,
          nsNamePrefix: 'nvme0n',
          subnqn: 'nqn.2026-01.example:dual-port',
          tnvmcapBytes: 8 * MiB,
          sanitize: { durationMs: 0 },
          namespaces: [
            { nsid: 1, sizeBytes: 2 * MiB },
            { nsid: 2, sizeBytes: 2 * MiB, attachedTo: [1] },
          ],
        },
        { name: 'nvme1', devPath: dev('nvme1'), cntlid: 2, shares: 'nvme0' },
      ],
    }));
    const [c0, c1] = [sim.dev('nvme0'), sim.dev('nvme1')];
    const listNs = async (ctrl: string, all = false) =>
      JSON.parse(
        (await sim.run(['list-ns', ctrl, ...(all ? ['--all'] : []), '-o', 'json'])).stdout,
      ).nsid_list.map((n: { nsid: number }) => n.nsid);
    // One subsystem: the same NQN, serial and capacity through both; attachment is per controller.
    const id0 = JSON.parse((await sim.run(['id-ctrl', c0, '-o', 'json'])).stdout);
    const id1 = JSON.parse((await sim.run(['id-ctrl', c1, '-o', 'json'])).stdout);
    expect([id0.subnqn, id1.subnqn]).toEqual([
      'nqn.2026-01.example:dual-port',
      'nqn.2026-01.example:dual-port',
    ]);
    expect([id0.cntlid, id1.cntlid]).toEqual([1, 2]);
    expect(id1.sn).toBe(id0.sn);
    expect(id1.unvmcap).toBe('4194304');
    expect(await listNs(c0)).toEqual([1, 2]);
    expect(await listNs(c1)).toEqual([1]);
    expect(await listNs(c1, true)).toEqual([1, 2]);
    // Namespace 2 is not attached to nvme1: plain id-ns reads zeros through it, --force its size.
    const ns2 = JSON.parse((await sim.run(['id-ns', c1, '-n', '2', '-o', 'json'])).stdout);
    expect(ns2.nsze).toBe(0);
    const forced = JSON.parse((await sim.run(['id-ns', c1, '-n', '2', '--force', '-o', 'json'])).stdout);
    expect(forced.nsze).toBe(4096);

    // Created through nvme1, attached through nvme0 to nvme0 only: seen through both.
    const created = await sim.run(['create-ns', c1, '--nsze=4096', '--ncap=4096', '--flbas=0']);
    expect(created.stdout).toBe('create-ns: Success, created nsid:3\n');
    expect(await listNs(c0, true)).toEqual([1, 2, 3]);
    expect((await sim.run(['attach-ns', c0, '-n', '3', '-c', '1'])).code).toBe(0);
    expect(await listNs(c0)).toEqual([1, 2, 3]);
    expect(await listNs(c1)).toEqual([1]);
    const twice = await sim.run(['attach-ns', c1, '-n', '3', '-c', '1,2']);
    expect(twice.stderr).toMatch(/Namespace Already Attached.*\(0x4118\)/);
    expect((await sim.run(['attach-ns', c1, '-n', '3', '-c', '2'])).code).toBe(0);
    expect(await listNs(c1)).toEqual([1, 3]);
    expect((await sim.run(['attach-ns', c1, '-n', '3', '-c', '7'])).stderr).toMatch(/\(0x411c\)/);
    // Detached from both, deleted through nvme0: gone through nvme1 too, its bytes left on the media.
    writeFileSync(sim.dev('nvme0n3'), pattern(2 * MiB, 0x33));
    expect((await sim.run(['detach-ns', c1, '-n', '3', '-c', '1,2'])).code).toBe(0);
    expect((await sim.run(['delete-ns', c0, '-n', '3'])).code).toBe(0);
    expect(await listNs(c1, true)).toEqual([1, 2]);
    const media = (await readNvmeSimState(sim.state)).controllers[0]!.mediaPath!;
    expect(readFileSync(media).includes(pattern(64, 0x33))).toBe(true);

    // A namespace reached through nvme1's path is written by I/O through it.
    writeFileSync(sim.dev('nvme0n1'), pattern(2 * MiB, 0x11));
    expect((await sim.run(['write-zeroes', sim.dev('nvme0n1'), '-s', '0', '-c', '15'])).code).toBe(0);
    expect(
      readFileSync(sim.dev('nvme0n1'))
        .subarray(0, 8192)
        .every((b) => b === 0),
    ).toBe(true);

    // Sanitize through nvme1 erases the whole subsystem: every namespace, attached or not, and the media.
    writeFileSync(sim.dev('nvme0n2'), pattern(2 * MiB, 0x22));
    expect((await sim.run(['sanitize', c1, '-a', '2'])).code).toBe(0);
    const log0 = JSON.parse((await sim.run(['sanitize-log', c0, '-o', 'json'])).stdout).nvme0;
    expect(log0.sstat.status).toMatch(/^\(1\)/);
    for (const f of [sim.dev('nvme0n1'), sim.dev('nvme0n2'), media]) {
      expect(readFileSync(f).every((b) => b === 0)).toBe(true);
    }
    // `list -v` shows one subsystem holding both controllers.
    const detail = JSON.parse((await sim.run(['list', '-v', '-o', 'json'])).stdout);
    expect(detail.Devices[0].Subsystems).toHaveLength(1);
    expect(
      detail.Devices[0].Subsystems[0].Controllers.map((c: { Controller: string }) => c.Controller),
    ).toEqual(['nvme0', 'nvme1']);
  }, 60_000);

  it('format of all namespaces (NSID FFFFFFFFh) reaches only those attached to the controller', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme0',
          devPath: dev('nvme0'),
          fna: 0x4,
          namespaces: [
            { nsid: 1, sizeBytes: MiB },
            { nsid: 2, sizeBytes: MiB, attached: false },
          ],
        },
      ],
    }));
    writeFileSync(sim.dev('nvme0n1'), pattern(MiB, 0x44));
    writeFileSync(sim.dev('nvme0n2'), pattern(MiB, 0x55));
    const r = await sim.run(['format', sim.dev('nvme0'), '-n', '0xffffffff', '-s', '1', '--force']);
    expect(r.code).toBe(0);
    expect(readFileSync(sim.dev('nvme0n1')).every((b) => b === 0)).toBe(true);
    // The detached namespace keeps the tenant's bytes (FNA bit 1 clear: secure erase is per namespace).
    expect(readFileSync(sim.dev('nvme0n2')).equals(pattern(MiB, 0x55))).toBe(true);
  }, 60_000);

  it('smart-log -o json is 2.3 json_smart_log: counters as strings, moved by writes from anyone', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme0',
          devPath: dev('nvme0'),
          namespaces: [{ nsid: 1, sizeBytes: MiB }],
          smart: {
            dataUnitsRead: '10',
            dataUnitsWritten: '1234567',
            hostReadCommands: '20',
            hostWriteCommands: '30',
            powerCycles: '7',
            powerOnHours: '4000',
            unsafeShutdowns: '1',
          },
        },
      ],
    }));
    const ctrl = sim.dev('nvme0');
    const first = await sim.run(['smart-log', ctrl, '-o', 'json']);
    // Field names, order, types and layout of nvme-print.c@v2.3 json_smart_log through json-c 0.16.
    expect(first).toEqual({
      code: 0,
      stderr: '',
      stdout:
        '{\n  "critical_warning":0,\n  "temperature":313,\n  "avail_spare":100,\n  "spare_thresh":10,\n' +
        '  "percent_used":0,\n  "endurance_grp_critical_warning_summary":0,\n  "data_units_read":"10",\n' +
        '  "data_units_written":"1234567",\n  "host_read_commands":"20",\n  "host_write_commands":"30",\n' +
        '  "controller_busy_time":"0",\n  "power_cycles":"7",\n  "power_on_hours":"4000",\n' +
        '  "unsafe_shutdowns":"1",\n  "media_errors":"0",\n  "num_err_log_entries":"0",\n' +
        '  "warning_temp_time":0,\n  "critical_comp_time":0,\n  "temperature_sensor_1":313,\n' +
        '  "thm_temp1_trans_count":0,\n  "thm_temp2_trans_count":0,\n  "thm_temp1_total_time":0,\n' +
        '  "thm_temp2_total_time":0\n}\n',
    });
    // uint128_t_to_string() groups with the locale's separator.
    const en = await sim.run(['smart-log', ctrl, '-o', 'json'], { LC_ALL: 'en_US.UTF-8' });
    expect(JSON.parse(en.stdout).data_units_written).toBe('1,234,567');
    // Nothing written: nothing moves, however often it is asked.
    expect((await sim.run(['smart-log', ctrl, '-o', 'json'])).stdout).toBe(first.stdout);
    // A write from outside (a tenant, through the block device) is counted at the next look:
    // the simulator counts the changed file whole, 1 MiB = 3 data units, 8 commands of 128 KiB.
    await clockPast(sim.dev('nvme0n1'));
    writeFileSync(sim.dev('nvme0n1'), pattern(MiB, 0x61));
    const after = JSON.parse((await sim.run(['smart-log', ctrl, '-o', 'json'])).stdout);
    expect(after).toMatchObject({
      data_units_written: '1234570',
      host_write_commands: '38',
      power_cycles: '7',
      power_on_hours: '4000',
    });
    // The simulator's own writes count too (write-zeroes of one LBA changes the file).
    await clockPast(sim.dev('nvme0n1'));
    expect((await sim.run(['write-zeroes', sim.dev('nvme0n1'), '-s', '0', '-c', '0'])).code).toBe(0);
    const zeroed = JSON.parse((await sim.run(['smart-log', ctrl, '-o', 'json'])).stdout);
    expect(BigInt(zeroed.host_write_commands)).toBeGreaterThan(38n);
    // A 128-bit counter stays exact past 2^64.
    const { setSmartCounters } = await import('./index.js');
    await setSmartCounters(sim.state, 'nvme0', { dataUnitsWritten: (2n ** 100n).toString() });
    const big = await sim.run(['smart-log', ctrl, '-o', 'json']);
    expect(JSON.parse(big.stdout).data_units_written).toBe((2n ** 100n).toString());
  }, 180_000);

  it('smart-log errors: unknown device and NVMe status exactly like the real tool', async () => {
    const sim = await makeSim((dev) => ({
      controllers: [
        {
          name: 'nvme0',
          devPath: dev('nvme0'),
          namespaces: [{ nsid: 1, sizeBytes: MiB }],
          faults: { 'smart-log': { mode: 'error', status: 0x4002 } },
        },
      ],
    }));
    const r = await sim.run(['smart-log', '/dev/nvme9', '-o', 'json']);
    expect(r.code).toBe(1);
    expect(r.stderr.startsWith('/dev/nvme9: No such file or directory\n\x1b[1mUsage: nvme smart-log')).toBe(
      true,
    );
    expect(await sim.run(['smart-log', sim.dev('nvme0'), '-o', 'json'])).toEqual({
      code: 1,
      stdout: '',
      stderr:
        'NVMe status: Invalid Field in Command: A reserved coded value or an unsupported value in a defined field(0x4002)\n',
    });
    if (haveRealNvme) {
      for (const args of [
        ['smart-log', '/dev/nvme9', '-o', 'json'],
        ['smart-log', '--help'],
      ]) {
        const real = spawnSync(REAL_NVME, args, { encoding: 'utf8', env: { ...process.env, LC_ALL: 'C' } });
        expect(await sim.run(args)).toEqual({ code: real.status, stdout: real.stdout, stderr: real.stderr });
      }
    }
  }, 30_000);
});

/**
 * Waits until the filesystem's clock has moved past `file`'s mtime (a probe
 * beside it is touched until its mtime is later), so that the next write to
 * `file` shows as a change to the simulator, which compares mtimes. The
 * kernel stamps files with a coarse clock (a jiffy, 4-10 ms): a fixed sleep
 * could fall inside one tick.
 */
async function clockPast(file: string): Promise<void> {
  const before = statSync(file).mtimeMs;
  const probe = `${file}.clock`;
  try {
    for (;;) {
      writeFileSync(probe, '');
      if (statSync(probe).mtimeMs > before) return;
      await new Promise((r) => setImmediate(r));
    }
  } finally {
    rmSync(probe, { force: true });
  }
}
