/**
 * The berth CLI's client commands as an operator runs them: a real `berth up`
 * (scheduler + two simulated hosts) in this process on 127.0.0.1, and
 * `bin/berth` as a child process with --endpoint. Table, JSON and YAML output,
 * the one-line errors and their exit codes, the non-TTY progress of a cleanup.
 * Independent invocations run concurrently: each start of bin/berth costs 1-2 s.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { SchedulerClient } from '../../src/client/sdk.js';
import { startUp, type Up } from '../../src/client/up/berth-up.js';
import { LiveMigratable } from '../../src/gen/berth/scheduler/v1/profile.js';
import { createLogger } from '../../src/logging.js';
import { tempDir } from '../helpers/agent.js';
import {
  BERTH,
  berth,
  cliEnv,
  parseJson,
  type Result,
  type Running,
  start,
  stop,
} from '../helpers/berth-cli.js';
import { available, SCRIPT_BIN, scriptPty } from '../helpers/prerequisites.js';
import { freePort } from '../helpers/processes.js';
import { eventually } from '../helpers/wait.js';

const H1 = 'sim-host-1';
const H2 = 'sim-host-2';
const GPU = '0000:3c:00.0';
const VF_RC = 'CUSTOM_PCI_8086_154C';
/** Per test: several bin/berth runs (1-2 s each on an idle machine, far more on a loaded one). */
const SLOW = 240_000;
const haveScript = available(scriptPty(), 'the progress-bar check on a pseudo-terminal');

interface DeviceJson {
  uuid: string;
  host: string;
  address: string;
  type: string;
  resource_class: string;
  device_state: string;
  status: string;
  cleanup_action: string;
  burned: boolean;
  allocatable: boolean;
  reserved: number;
  traits: string[];
  attributes: Record<string, string>;
  last_cleanup: {
    outcome: string;
    action: string;
    proof: {
      method: string;
      read_back: string;
      bytes_read: number;
      bytes_total: number;
      findings: string[];
      census: {
        controller: string;
        namespaces: { nsid: number; size_bytes: number; covered_by: string }[];
        unallocated: string;
      } | null;
    } | null;
  } | null;
}
interface ArqJson {
  uuid: string;
  state: string;
  host: string;
  device_uuid: string;
  device_address: string;
  tag: string;
  attach_handle_type: string;
  attach_handle_info: {
    domain: string;
    bus: string;
    device: string;
    function: string;
    managed: boolean;
  } | null;
}

/**
 * The error line contract: exactly one error line on stderr. A follower that
 * heard nothing for WAIT_NOTICE_MS also says what it waits for
 * (`berth: waiting for …`, cleanup-progress.ts); how many of those a loaded
 * machine prints is timing, not the contract, so they are set aside.
 */
function errorLineOf(r: Result): string {
  const lines = r.stderr
    .trimEnd()
    .split('\n')
    .filter((l) => !/^berth: waiting for /.test(l));
  expect(lines, r.stderr).toHaveLength(1);
  return lines[0]!;
}

describe('berth client commands', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let up: Up;
  let sdk: SchedulerClient;
  let env: NodeJS.ProcessEnv;
  const watchers: Running[] = [];
  let ep: string[];
  const b = (...args: string[]) => berth([...args, ...ep], env);

  beforeAll(async () => {
    dir = await tempDir('berth-cli-');
    up = await startUp({
      listen: '127.0.0.1:0',
      stateDir: join(dir.path, 'state'),
      logger: createLogger({ level: 'silent' }),
    });
    sdk = new SchedulerClient({ endpoint: up.endpoint, token: up.adminToken });
    // startUp returns once the agents registered; the scheduler follows their
    // inventory streams a moment later. Start testing once both hosts are in.
    await eventually(
      () => sdk.devices.listDevices({ filter: undefined, pageSize: 0, pageToken: '' }),
      (r) => r.devices.length === 18,
      60_000,
    );
    await eventually(
      () => sdk.hosts.listHosts({}),
      (r) => r.hosts.length === 2 && r.hosts.every((h) => h.connected && h.deviceCount === 9),
      60_000,
    );
    env = cliEnv(join(dir.path, 'client-config.yaml'), { BERTH_TOKEN: up.adminToken });
    ep = ['--endpoint', up.endpoint];
  }, SLOW);
  afterAll(async () => {
    for (const w of watchers) await stop(w);
    sdk?.close();
    await up?.stop();
    await dir?.cleanup();
  }, SLOW);

  it(
    'lists and shows hosts and devices as tables, JSON and YAML, with filters',
    async () => {
      const [hostsJson, hostShow, table, nvmeJson, vfYaml, hostsTable, wide, none, protoName] =
        await Promise.all([
          b('host', 'list', '-o', 'json'),
          b('host', 'show', H2),
          b('device', 'list'),
          b('device', 'list', '--host', H1, '--type', 'nvme', '-o', 'json'),
          b('device', 'list', '--state', 'available', '--resource-class', VF_RC, '-o', 'yaml'),
          b('host', 'list'),
          b('device', 'list', '-o', 'wide'),
          b('device', 'list', '--state', 'error'),
          b('device', 'list', '--type', 'DEVICE_TYPE_NVME', '-o', 'json'),
        ]);
      const hosts =
        parseJson<{ name: string; connected: boolean; device_count: number; drivers: string[] }[]>(hostsJson);
      expect(hosts.map((h) => h.name).sort()).toEqual([H1, H2]);
      expect(hosts.every((h) => h.connected && h.device_count === 9)).toBe(true);
      // Tables as kubectl prints them: no borders, upper-case headers, within 120 columns.
      expect(hostsTable.stdout).toMatch(/^NAME {3,}STATUS {3,}ENDPOINT {3,}DEVICES/);
      expect(hostsTable.stdout).toMatch(/^sim-host-1 {3,}connected {3,}127\.0\.0\.1:\d+ {3,}9 /m);
      expect(hostShow.code).toBe(0);
      expect(hostShow.stdout).toMatch(/^name: +sim-host-2$/m);

      expect(table.code, table.stderr).toBe(0);
      const lines = table.stdout.trimEnd().split('\n');
      expect(lines[0]).toMatch(/^UUID {3,}HOST {3,}ADDRESS {3,}TYPE {3,}STATE {3,}CLEANUP {3,}INSTANCE$/);
      expect(lines.slice(1)).toHaveLength(18);
      for (const l of lines) expect(l.length, l).toBeLessThanOrEqual(120);
      expect(lines.slice(1).every((l) => /^[0-9a-f]{8} {3,}sim-host-[12] /.test(l))).toBe(true);
      expect(table.stdout).toMatch(/ 0000:3d:00\.0 {3,}nvme {3,}available {3,}sanitize-crypto {3,}- *$/m);
      expect(table.stdout).not.toMatch(/[|+]-/);
      // -o wide: the full uuid and the columns that do not fit.
      expect(wide.stdout.split('\n')[0]).toMatch(
        /^UUID .*RESOURCE CLASS +VENDOR:PRODUCT +NUMA +IOMMU +FLAGS$/,
      );
      expect(wide.stdout).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12} /m);
      // An empty list says so (on stderr, as kubectl does), and JSON is [].
      expect(none.code).toBe(0);
      expect(none.stdout).toBe('');
      expect(none.stderr.trim()).toBe('No devices found.');
      expect(parseJson<unknown[]>(await b('device', 'list', '--state', 'error', '-o', 'json'))).toEqual([]);
      // Filters take the proto's enum names too, as buf curl prints them.
      expect(parseJson<DeviceJson[]>(protoName)).toHaveLength(8);

      const nvme = parseJson<DeviceJson[]>(nvmeJson);
      expect(nvme).toHaveLength(4);
      expect(nvme.every((d) => d.host === H1 && d.type === 'nvme' && d.device_state === 'available')).toBe(
        true,
      );
      expect(nvme.map((d) => d.cleanup_action).sort()).toEqual([
        'sanitize-block',
        'sanitize-crypto',
        'shred',
        'write-zeroes',
      ]);
      expect(nvme[0]!.status).toBe('enabled');
      expect(nvme[0]!.reserved).toBe(0);

      expect(vfYaml.code, vfYaml.stderr).toBe(0);
      const vfs = parseYaml(vfYaml.stdout) as DeviceJson[];
      expect(vfs).toHaveLength(8);
      expect(new Set(vfs.map((d) => d.resource_class))).toEqual(new Set([VF_RC]));
    },
    SLOW,
  );

  it(
    'shows a device by uuid and by host/address; -o json is snake_case with enum names',
    async () => {
      const [byAddr, byAddrTable] = await Promise.all([
        b('device', 'show', `${H1}/${GPU}`, '-o', 'json'),
        b('device', 'show', `${H1}/${GPU}`),
      ]);
      const gpu = parseJson<DeviceJson & { one_time_use: boolean; managed: boolean }>(byAddr);
      expect(gpu).toMatchObject({
        host: H1,
        address: GPU,
        one_time_use: true,
        managed: false,
        device_state: 'available',
      });
      expect(gpu.traits).toContain('HW_ONE_TIME_USE');
      expect(byAddrTable.stdout).toMatch(/^one_time_use: +true$/m);
      expect(byAddrTable.stdout).not.toMatch(/[|+]-/);
      const byUuid = parseJson<DeviceJson>(await b('device', 'show', gpu.uuid, '-o', 'json'));
      expect(byUuid.address).toBe(GPU);
      // As the table shows it (a unique uuid prefix) and as lspci prints the address.
      const [byPrefix, byShortAddr] = await Promise.all([
        b('device', 'show', gpu.uuid.slice(0, 8), '-o', 'json'),
        b('device', 'show', `${H1}/${GPU.slice(5).toUpperCase()}`, '-o', 'json'),
      ]);
      expect(parseJson<DeviceJson>(byPrefix).uuid).toBe(gpu.uuid);
      expect(parseJson<DeviceJson>(byShortAddr).uuid).toBe(gpu.uuid);
      const noSuch = await b('device', 'show', 'ffff0000');
      expect(errorLineOf(noSuch)).toBe(
        'berth: NOT_FOUND: no device uuid starts with "ffff0000" [DEVICE_NOT_FOUND]',
      );
    },
    SLOW,
  );

  it(
    'reports errors as one line with the right exit code',
    async () => {
      const closed = await freePort();
      const [unreachable, notFound, badState, unknownCmd, badRef, alreadyClean, badOutput, badInstance] =
        await Promise.all([
          berth(['device', 'list', '--endpoint', `127.0.0.1:${closed}`], env),
          b('device', 'show', '00000000-0000-4000-8000-000000000000'),
          b('device', 'list', '--state', 'bogus'),
          b('device', 'frobnicate'),
          b('device', 'show', 'not-a-device'),
          b('device', 'clean', `${H2}/0000:5d:00.0`),
          b('host', 'list', '-o', 'xml'),
          b('instance', 'xml', 'bad id!'),
        ]);
      expect(unreachable.code).toBe(3);
      expect(errorLineOf(unreachable)).toMatch(/^berth: UNAVAILABLE: /);
      expect(notFound.code).toBe(1);
      expect(errorLineOf(notFound)).toBe(
        'berth: NOT_FOUND: device "00000000-0000-4000-8000-000000000000" not found [DEVICE_NOT_FOUND]',
      );
      expect(badState.code).toBe(2);
      expect(errorLineOf(badState)).toMatch(/^berth: usage: --state: expected one of available, allocated/);
      expect(unknownCmd.code).toBe(2);
      expect(unknownCmd.stderr).toMatch(/unknown command/);
      expect(badRef.code).toBe(2);
      expect(errorLineOf(badRef)).toMatch(/give a uuid \(or its first characters.*\) or host\/address/);
      expect(alreadyClean.code).toBe(1);
      expect(errorLineOf(alreadyClean)).toMatch(/^berth: FAILED_PRECONDITION: .* \[DEVICE_ALREADY_CLEAN\]$/);
      expect(badOutput.code).toBe(2);
      expect(badInstance.code).toBe(1);
      expect(errorLineOf(badInstance)).toMatch(
        /^berth: INVALID_ARGUMENT: instance_uuid: "bad id!" is not an instance id/,
      );
    },
    SLOW,
  );

  it(
    'prints help for a command and exits 0',
    async () => {
      const r = await berth(['device', 'list', '--help'], env);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/--endpoint <addr>/);
      expect(r.stdout).toMatch(/--resource-class <rc>/);
      expect(r.stdout).toMatch(/snake_case/);
    },
    SLOW,
  );

  it(
    'creates, lists, shows and deletes profiles from flags and from a YAML file',
    async () => {
      const file = join(dir.path, 'profile.yaml');
      const { writeFile } = await import('node:fs/promises');
      await writeFile(
        file,
        [
          'name: cli-from-file',
          'description: from a file',
          'groups:',
          '  - vendor_id: "144d"',
          '    product_id: a824',
          '    required_traits: [HW_NVME_WZS]',
          '    forbidden_traits: [HW_NVME_CES]',
          '    count: 2',
          '',
        ].join('\n'),
      );
      const [fromFlags, fromFile, badFile] = await Promise.all([
        b(
          'profile',
          'create',
          'cli-flags',
          '--resource-class',
          VF_RC,
          '--live-migratable',
          'yes',
          '--count',
          '2',
          '-o',
          'json',
        ),
        b('profile', 'create', '--file', file, '-o', 'json'),
        b('profile', 'create', 'x', '--file', join(dir.path, 'missing.yaml')),
      ]);
      expect(parseJson<{ groups: unknown[] }>(fromFlags).groups).toEqual([
        {
          resource_class: VF_RC,
          vendor_id: '',
          product_id: '',
          required_traits: [],
          forbidden_traits: [],
          live_migratable: 'yes',
          count: 2,
        },
      ]);
      const ff = parseJson<{
        name: string;
        description: string;
        groups: { count: number; forbidden_traits: string[] }[];
      }>(fromFile);
      expect(ff).toMatchObject({ name: 'cli-from-file', description: 'from a file' });
      expect(ff.groups[0]).toMatchObject({ count: 2, forbidden_traits: ['HW_NVME_CES'] });
      expect(badFile.code).toBe(2);

      const [list, show] = await Promise.all([
        b('profile', 'list', '-o', 'json'),
        b('profile', 'show', 'cli-flags'),
      ]);
      expect(parseJson<{ name: string }[]>(list).map((p) => p.name)).toEqual(
        expect.arrayContaining(['cli-flags', 'cli-from-file']),
      );
      expect(show.stdout).toMatch(/^groups: +2x CUSTOM_PCI_8086_154C live_migratable=yes/m);
      const del = await b('profile', 'delete', 'cli-from-file');
      expect(del.code, del.stderr).toBe(0);
      const gone = await b('profile', 'show', 'cli-from-file');
      expect(gone.code).toBe(1);
      expect(errorLineOf(gone)).toMatch(/^berth: NOT_FOUND: /);
    },
    SLOW,
  );

  it(
    'creates and binds ARQs, renders the XML and the metadata, and follows a failed then a fixed cleanup',
    async () => {
      const created = await b(
        'profile',
        'create',
        'cli-nvme',
        '--vendor-id',
        '144d',
        '--product-id',
        'a824',
        '--trait',
        'HW_NVME_CES',
      );
      expect(created.code, created.stderr).toBe(0);
      const arqs = parseJson<ArqJson[]>(
        await b('arq', 'create', '--profile', 'cli-nvme', '--tag', 'scratch', '-o', 'json'),
      );
      expect(arqs).toHaveLength(1);
      expect(arqs[0]!.state).toBe('initial');
      const bound = parseJson<ArqJson[]>(
        await b('arq', 'bind', arqs[0]!.uuid, '--instance', 'vm-cli', '--host', H1, '-o', 'json'),
      );
      expect(bound[0]).toMatchObject({ state: 'bound', host: H1, tag: 'scratch', attach_handle_type: 'pci' });
      expect(bound[0]!.attach_handle_info?.managed).toBe(true);
      const address = bound[0]!.device_address;

      const devicesFile = join(dir.path, 'devices.json');
      const { writeFile } = await import('node:fs/promises');
      await writeFile(
        devicesFile,
        JSON.stringify({
          nics: [
            {
              mac: '52:54:00:aa:bb:cc',
              address: '0000:00:03.0',
              tag: 'uplink',
              model: 'virtio',
              devname: 'eth0',
            },
          ],
          disks: [{ serial: 'CLI-DISK-1', bus: 'pci', address: '0000:00:04.0', tag: 'root' }],
        }),
      );
      const [list, show, xml, xmlJson, setDevices] = await Promise.all([
        b('arq', 'list', '--instance', 'vm-cli'),
        b('arq', 'show', arqs[0]!.uuid, '-o', 'json'),
        b('instance', 'xml', 'vm-cli'),
        b('instance', 'xml', 'vm-cli', '-o', 'json'),
        b('instance', 'set-devices', 'vm-cli', '--file', devicesFile),
      ]);
      expect(list.stdout).toMatch(new RegExp(`^${arqs[0]!.uuid.slice(0, 8)} +cli-nvme +bound +vm-cli `, 'm'));
      expect(parseJson<ArqJson>(show).device_address).toBe(address);
      // The 8 characters the table (and the demo) print are enough to name the ARQ.
      const byPrefix = await b('arq', 'show', arqs[0]!.uuid.slice(0, 8), '-o', 'json');
      expect(parseJson<ArqJson>(byPrefix).device_address).toBe(address);
      expect(xml.stdout).toMatch(/^<hostdev mode='subsystem' type='pci' managed='yes'>/);
      expect(xml.stdout).toContain(`bus='0x${address.slice(5, 7)}'`);
      expect(xml.stdout).toContain("<alias name='ua-scratch'/>");
      const xj = parseJson<{
        xml: string;
        hostdevs: { tag: string; managed: boolean; guest: { bus: string } }[];
      }>(xmlJson);
      expect(xj.hostdevs).toHaveLength(1);
      expect(xj.hostdevs[0]).toMatchObject({ tag: 'scratch', managed: true, guest: { bus: '00' } });
      expect(setDevices.code, setDevices.stderr).toBe(0);
      expect(setDevices.stdout).toMatch(/1 NIC\(s\), 1 disk\(s\)/);
      const meta = parseJson<{ devices: { type: string; tags: string[]; devname?: string }[] }>(
        await b('instance', 'metadata', 'vm-cli', '-o', 'json'),
      );
      expect(meta.devices.map((d) => d.type).sort()).toEqual(['disk', 'nic', 'passthrough']);
      expect(meta.devices.find((d) => d.type === 'nic')).toMatchObject({ devname: 'eth0', tags: ['uplink'] });

      // A failed cleanup: the drive ends in error, the command says why and exits 1.
      const dev = parseJson<DeviceJson>(await b('device', 'show', `${H1}/${address}`, '-o', 'json'));
      const sim = up.sims.find((s) => s.definition.host === H1)!;
      await sim.setFault(dev.attributes.nvme_controller!, 'sanitize', { mode: 'sanitize-fails' });
      const del = await b('arq', 'delete', '--instance', 'vm-cli');
      expect(del.stdout).toContain(arqs[0]!.uuid);
      const followed = await b('device', 'watch-cleanup', `${H1}/${address}`);
      expect(followed.code).toBe(1);
      expect(followed.stdout).toMatch(/^phase=sanitizing percent=\d+ bytes=\d+\/\d+ action=sanitize-crypto/m);
      expect(followed.stdout).toMatch(/^phase=failed /m);
      expect(errorLineOf(followed)).toMatch(/cleanup failed: .*sanitize failed/);
      const inError = parseJson<DeviceJson>(await b('device', 'show', dev.uuid, '-o', 'json'));
      expect(inError).toMatchObject({ device_state: 'error', reserved: 1, allocatable: false });

      // clean --wait with the fault still there fails again (exit 1, the reason printed).
      const again = await b('device', 'clean', dev.uuid, '--wait');
      expect(again.code).toBe(1);
      expect(again.stdout).toMatch(/^phase=failed /m);
      expect(errorLineOf(again)).toMatch(/cleanup failed/);

      // The operator clears the fault and cleans: plain progress lines, exit 0, available.
      await sim.setFault(dev.attributes.nvme_controller!, 'sanitize', null);
      const fixed = await b('device', 'clean', `${H1}/${address}`, '--wait');
      expect(fixed.code, fixed.stderr).toBe(0);
      expect(fixed.stdout).toMatch(/^cleaning sim-host-1\/\S+ \(sanitize-crypto\), job \S+/m);
      expect(fixed.stdout).toMatch(/^phase=sanitizing percent=\d+ /m);
      expect(fixed.stdout).toMatch(/^phase=succeeded percent=100 /m);
      expect(fixed.stdout.includes('\u001b[')).toBe(false); // no terminal control codes when stdout is a pipe
      const clean = parseJson<DeviceJson>(await b('device', 'show', dev.uuid, '-o', 'json'));
      expect(clean).toMatchObject({ device_state: 'available', reserved: 0 });
      expect(clean.last_cleanup).toMatchObject({ outcome: 'succeeded', action: 'sanitize-crypto' });
      // What the cleanup proved: this sanitize seen on the controller's log, no read-back needed.
      expect(clean.last_cleanup?.proof).toMatchObject({
        method: 'sanitize',
        read_back: 'none',
        bytes_read: 0,
      });
      expect(clean.last_cleanup?.proof?.findings[0]).toMatch(/^sanitize \(SANACT 4\) on nvme\d observed/);
      // What the agent's own census found on the media, and how each part was covered.
      expect(clean.last_cleanup?.proof?.census).toMatchObject({
        controller: dev.attributes.nvme_controller,
        namespaces: [{ nsid: 1, size_bytes: 16 * 1024 * 1024, covered_by: 'sanitize' }],
        unallocated: 'the proven sanitize erased the unallocated capacity with the namespaces',
      });

      // On a terminal the same progress is a live bar (phase, percent, bytes, ETA), not lines.
      // `script` gives the command a pseudo-terminal; watch-cleanup replays the finished job.
      if (haveScript) {
        const tty = await new Promise<Result>((resolve) =>
          execFile(
            SCRIPT_BIN,
            ['-qec', `${BERTH} device watch-cleanup ${H1}/${address} --endpoint ${up.endpoint}`, '/dev/null'],
            { env, timeout: 60_000 },
            (err, stdout, stderr) =>
              resolve({ code: err ? Number((err as { code?: number }).code ?? -1) : 0, stdout, stderr }),
          ),
        );
        expect(tty.code, tty.stdout + tty.stderr).toBe(0);
        expect(tty.stdout).toMatch(/succeeded\s+\|[\u2588\u2591]+\| 100% \| - \| ETA/);
        expect(tty.stdout).not.toMatch(/^phase=/m);
        expect(tty.stdout).not.toContain('NFs');
      }
    },
    SLOW,
  );

  it(
    'plans, aborts, plans again and commits a live migration',
    async () => {
      await sdk.profiles.createProfile({
        profile: {
          name: 'cli-vf',
          uuid: '',
          description: '',
          groups: [
            {
              resourceClass: VF_RC,
              vendorId: '',
              productId: '',
              requiredTraits: [],
              forbiddenTraits: [],
              liveMigratable: LiveMigratable.LIVE_MIGRATABLE_YES,
              count: 1,
            },
          ],
          createdAt: undefined,
        },
      });
      const [arq] = (
        await sdk.arqs.createAcceleratorRequests({ profileName: 'cli-vf', requestId: '', tags: [] })
      ).acceleratorRequests;
      await sdk.arqs.bindAcceleratorRequests({
        bindings: [{ arqUuid: arq!.uuid, instanceUuid: 'vm-mig', host: H1, tag: '' }],
      });
      type MigJson = {
        uuid: string;
        state: string;
        pci_dev_map_src_dst: Record<string, string>;
        destination_xml: string;
      };
      const plan = parseJson<MigJson>(await b('migration', 'plan', 'vm-mig', '--to', H2, '-o', 'json'));
      expect(plan.state).toBe('planned');
      expect(Object.keys(plan.pci_dev_map_src_dst)).toHaveLength(1);
      expect(plan.destination_xml).toContain("bus='0x5b'");
      const aborted = parseJson<MigJson>(await b('migration', 'abort', plan.uuid, '-o', 'json'));
      expect(aborted.state).toBe('aborted');
      const plan2 = parseJson<MigJson>(await b('migration', 'plan', 'vm-mig', '--to', H2, '-o', 'json'));
      const commit = await b('migration', 'commit', plan2.uuid);
      expect(commit.code, commit.stderr).toBe(0);
      expect(commit.stdout).toMatch(/^state: +committed$/m);
      expect(commit.stdout).toMatch(/^pci_dev_map_src_dst: +0000:3b:02\.\d -> 0000:5b:02\.\d/m);
      const moved = parseJson<ArqJson[]>(await b('arq', 'list', '--instance', 'vm-mig', '-o', 'json'));
      expect(moved[0]!.host).toBe(H2);
      const del = await b('arq', 'delete', moved[0]!.uuid, '-o', 'json');
      expect(parseJson<{ deleted_uuids: string[] }>(del).deleted_uuids).toEqual([moved[0]!.uuid]);
    },
    SLOW,
  );

  it(
    'disables and enables a device, releases a burned one, and streams changes with device watch',
    async () => {
      // -o json runs until Ctrl-C; the line form stops by itself after one change (whichever comes).
      const json = start(['device', 'watch', '--host', H1, '-o', 'json', ...ep], env);
      const lines = start(['device', 'watch', '--host', H1, '--max-events', '1', ...ep], env);
      watchers.push(json, lines);
      await Promise.all([json.waitFor(/"synced":true/), lines.waitFor(/ synced /)]);

      const vf = `${H1}/0000:3b:02.3`;
      const disabled = parseJson<DeviceJson>(await b('device', 'disable', vf, '-o', 'json'));
      expect(disabled).toMatchObject({ status: 'maintaining', allocatable: false, reserved: 1 });
      await json.waitFor(/"status":"maintaining"/);
      json.child.kill('SIGINT');
      expect(await json.exited).toEqual({ code: 0, signal: null });
      expect(await lines.exited).toEqual({ code: 0, signal: null });
      const events = json
        .stdout()
        .trim()
        .split('\n')
        .map(
          (l) =>
            JSON.parse(l) as {
              initial: boolean;
              synced: boolean;
              device: DeviceJson | null;
              revision: number;
            },
        );
      expect(events.filter((e) => e.initial && e.device)).toHaveLength(9);
      expect(events.filter((e) => e.synced)).toHaveLength(1);
      const change = events.find((e) => !e.initial && e.device?.status === 'maintaining');
      expect(change?.device).toMatchObject({ address: '0000:3b:02.3', allocatable: false });
      const revisions = events.map((e) => e.revision);
      expect(revisions.slice(-1)[0]).toBeGreaterThan(revisions[0]!);
      expect(lines.stdout()).toMatch(
        /^rev=\d+ initial sim-host-1\/0000:3d:00\.0 uuid=\S+ state=available status=enabled/m,
      );
      expect(lines.stdout().match(/^rev=\d+ changed /gm)).toHaveLength(1);

      const maintaining = await b('device', 'list', '--host', H1);
      expect(maintaining.stdout).toMatch(/ 0000:3b:02\.3 {3,}pci {3,}available,maintaining /);
      const enabled = await b('device', 'enable', vf);
      expect(enabled.stdout).toMatch(/^status: +enabled$/m);

      // Burn the GPU through the SDK, then release it with the CLI.
      await sdk.profiles.createProfile({
        profile: {
          name: 'cli-gpu',
          uuid: '',
          description: '',
          groups: [
            {
              resourceClass: '',
              vendorId: '10de',
              productId: '25b6',
              requiredTraits: [],
              forbiddenTraits: [],
              liveMigratable: 0,
              count: 1,
            },
          ],
          createdAt: undefined,
        },
      });
      const [g] = (
        await sdk.arqs.createAcceleratorRequests({ profileName: 'cli-gpu', requestId: '', tags: [] })
      ).acceleratorRequests;
      await sdk.arqs.bindAcceleratorRequests({
        bindings: [{ arqUuid: g!.uuid, instanceUuid: 'vm-gpu', host: H1, tag: '' }],
      });
      await sdk.arqs.deleteAcceleratorRequests({ uuids: [g!.uuid], instanceUuid: '' });
      const burned = parseJson<DeviceJson>(await b('device', 'show', `${H1}/${GPU}`, '-o', 'json'));
      expect(burned).toMatchObject({ burned: true, allocatable: false });
      // The list shows a burned device as such, beside its state.
      const listed = await b('device', 'list', '--host', H1);
      expect(listed.stdout).toMatch(new RegExp(` ${GPU} {3,}pci {3,}available,burned {3,}`));
      const released = parseJson<DeviceJson>(await b('device', 'release', `${H1}/${GPU}`, '-o', 'json'));
      expect(released).toMatchObject({ burned: false, allocatable: true, reserved: 0 });
    },
    SLOW,
  );
});
