/**
 * The sharp edges a newcomer hit, each as the CLI shows it: a malformed
 * client configuration (exit 2, naming the file), a host typo (in --host and
 * in the endpoint: "no such host"), a cleanup in progress (pointing to
 * watch-cleanup), watch-cleanup of a device never cleaned, a database path
 * that cannot be opened (named), a dry run of a configuration `agent serve`
 * would refuse, default tables within 120 columns and `device show` wrapping
 * its attributes — and no error line with doubled punctuation.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import { startUp, type Up } from '../../src/client/up/berth-up.js';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { createLogger } from '../../src/logging.js';
import { withStateLock } from '../../src/sim/nvme-cli/state.js';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv, type Result } from '../helpers/berth-cli.js';
import { eventually } from '../helpers/wait.js';

const errorLine = (r: Result) => {
  const lines = r.stderr.trimEnd().split('\n');
  expect(lines, r.stderr).toHaveLength(1);
  // No "….;", "..", ".:" — a message that ends before a hint ends without its stop.
  expect(lines[0]).not.toMatch(/[.;:,][.;:,]|\. ;/);
  return lines[0]!;
};
const widest = (text: string) => Math.max(...text.split('\n').map((l) => [...l].length));

describe('the edges of the CLI', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let up: Up;
  let sdk: SchedulerClient;
  let env: NodeJS.ProcessEnv;
  let ep: string[];
  const b = (...args: string[]) => berth([...args, ...ep], env);

  beforeAll(async () => {
    dir = await tempDir('berth-edges-');
    up = await startUp({
      listen: '127.0.0.1:0',
      stateDir: join(dir.path, 'state'),
      logger: createLogger({ level: 'silent' }),
    });
    sdk = new SchedulerClient({ endpoint: up.endpoint, token: up.adminToken });
    await eventually(
      () => sdk.devices.listDevices({}),
      (r) => r.devices.length === 18,
      60_000,
    );
    env = cliEnv(join(dir.path, 'client.yaml'), { BERTH_TOKEN: up.adminToken });
    ep = ['--endpoint', up.endpoint];
  }, 120_000);
  afterAll(async () => {
    sdk?.close();
    await up?.stop();
    await dir?.cleanup();
  });

  it('a malformed client configuration is a usage error (exit 2) naming the file and the key', async () => {
    const bad = join(dir.path, 'bad.yaml');
    await writeFile(bad, 'endpoint: [1, 2\n');
    const typo = join(dir.path, 'typo.yaml');
    await writeFile(typo, 'endpont: 127.0.0.1:7070\n');
    const [notYaml, unknownKey] = await Promise.all([
      berth(['host', 'list'], cliEnv(bad)),
      berth(['host', 'list'], cliEnv(typo)),
    ]);
    expect(notYaml.code).toBe(2);
    expect(errorLine(notYaml)).toMatch(
      new RegExp(`^berth: usage: the client configuration ${bad} \\(\\$BERTH_CONFIG\\) is not YAML: `),
    );
    expect(unknownKey.code).toBe(2);
    expect(errorLine(unknownKey)).toBe(
      `berth: usage: the client configuration ${typo} ($BERTH_CONFIG): endpont: unknown key (known: endpoint, token, tls, state_dir)`,
    );
  }, 60_000);

  it('a host typo says "no such host", in a filter and in the endpoint', async () => {
    const [filter, watch, endpoint] = await Promise.all([
      b('device', 'list', '--host', 'sim-hots-1'),
      b('device', 'watch', '--host', 'sim-hots-1'),
      berth(['host', 'list', '--endpoint', 'no-such-scheduler.invalid:7070'], env),
    ]);
    for (const r of [filter, watch]) {
      expect(r.code).toBe(1);
      expect(errorLine(r)).toBe(
        'berth: NOT_FOUND: no such host "sim-hots-1" (known hosts: sim-host-1, sim-host-2) [HOST_NOT_FOUND]',
      );
    }
    expect(endpoint.code).toBe(3);
    expect(errorLine(endpoint)).toBe(
      `berth: UNAVAILABLE: no such host "no-such-scheduler.invalid" (--endpoint): check the name, or give the scheduler's address`,
    );
  }, 60_000);

  it('watch-cleanup of a device never cleaned says so; a cleanup in progress points to watch-cleanup', async () => {
    const never = await b('device', 'watch-cleanup', 'sim-host-2/0000:5d:00.0');
    expect(never.code).toBe(1);
    expect(errorLine(never)).toMatch(
      /^berth: NOT_FOUND: sim-host-2\/0000:5d:00\.0 has never been cleaned: there is no cleanup to follow \(it is available\); a cleanup starts when the ARQ holding it is deleted \[NO_CLEANUP\]$/,
    );

    // A cleanup that runs for two minutes; cleaning the device again meanwhile is refused.
    const drive = (await sdk.devices.listDevices({ filter: { host: 'sim-host-2' } })).devices.find((d) =>
      d.traits.includes('HW_NVME_CES'),
    )!;
    await withStateLock(join(up.stateDir, 'sim', 'sim-host-2', 'nvme-sim.json'), (state) => {
      state.controllers.find((c) => c.name === drive.attributes.nvme_controller)!.sanitize.durationMs =
        120_000;
      return { changed: true, result: undefined };
    });
    await sdk.profiles.createProfile({
      profile: {
        name: 'edge',
        groups: [{ vendorId: drive.vendorId, productId: drive.productId, requiredTraits: ['HW_NVME_CES'] }],
      },
    });
    const [arq] = (await sdk.arqs.createAcceleratorRequests({ profileName: 'edge' })).acceleratorRequests;
    await sdk.arqs.bindAcceleratorRequests({
      bindings: [{ arqUuid: arq!.uuid, instanceUuid: 'vm-edge', host: 'sim-host-2' }],
    });
    await sdk.arqs.deleteAcceleratorRequests({ instanceUuid: 'vm-edge' });
    await eventually(
      () => sdk.devices.getDevice({ device: { ref: { $case: 'uuid', value: drive.uuid } } }),
      (r) => r.device!.deviceState === DeviceState.DEVICE_STATE_CLEANING,
      60_000,
    );
    const again = await b('device', 'clean', drive.uuid);
    expect(again.code).toBe(1);
    expect(errorLine(again)).toMatch(
      new RegExp(`\\[CLEANUP_IN_PROGRESS\\]; follow it with: berth device watch-cleanup ${drive.uuid}$`),
    );
    await withStateLock(join(up.stateDir, 'sim', 'sim-host-2', 'nvme-sim.json'), (state) => {
      state.controllers.find((c) => c.name === drive.attributes.nvme_controller)!.sanitize.durationMs = 100;
      return { changed: true, result: undefined };
    });
    await eventually(
      () => sdk.devices.getDevice({ device: { ref: { $case: 'uuid', value: drive.uuid } } }),
      (r) => r.device!.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      60_000,
    );
  }, 180_000);

  it('a database that cannot be opened is named, with the flag (exit 2); sqlite:// URLs are files', async () => {
    const missing = join(dir.path, 'no-such-dir', 'sched.db');
    const r = await berth(
      ['scheduler', 'serve', '--db', `sqlite://${missing}`, '--listen', '127.0.0.1:0', '--insecure-no-auth'],
      env,
    );
    expect(r.code).toBe(2);
    expect(errorLine(r)).toBe(
      `berth: configuration error: --db sqlite://${missing} (${missing}): Cannot open database because the directory does not exist`,
    );
  }, 60_000);

  it('the dry run checks discovery (exit 0 without the auth only serve needs, with a note); --serve checks what serve needs too', async () => {
    const sim = up.sims[0]!;
    const { auth: _off, ...noAuth } = sim.agentConfig as Record<string, unknown>;
    const file = join(dir.path, 'no-auth.yaml');
    await writeFile(file, JSON.stringify({ ...noAuth, state_dir: join(dir.path, 'dry-state') }));
    const [plain, dry, withFlag] = await Promise.all([
      berth(['agent', 'discover', '-c', file, '-o', 'json'], env),
      berth(['agent', 'discover', '-c', file, '-o', 'json', '--serve'], env),
      berth(['agent', 'discover', '-c', file, '-o', 'json', '--serve', '--insecure-no-auth'], env),
    ]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(JSON.parse(plain.stdout).devices).toHaveLength(9);
    expect(errorLine(plain)).toMatch(
      new RegExp(
        `^berth: note: agent serve would refuse ${file}: auth: no authentication configured: .* \\(discovery works; --serve makes this an error\\)$`,
      ),
    );
    expect(dry.code).toBe(2);
    expect(JSON.parse(dry.stdout).devices).toHaveLength(9);
    expect(errorLine(dry)).toMatch(
      new RegExp(
        `^berth: configuration error: ${file}: auth: no authentication configured: .* \\(agent serve refuses this configuration\\)$`,
      ),
    );
    expect(withFlag.code, withFlag.stderr).toBe(0);
  }, 60_000);

  it('default tables fit 120 columns, -o wide does not have to, and device show wraps its attributes', async () => {
    const nvme = (await sdk.devices.listDevices({ filter: { host: 'sim-host-1' } })).devices.find(
      (d) => d.attributes.nvme_controller,
    )!;
    const [devices, hosts, show, wide, dry] = await Promise.all([
      b('device', 'list'),
      b('host', 'list'),
      b('device', 'show', nvme.uuid),
      b('host', 'list', '-o', 'wide'),
      berth(['agent', 'discover', '-c', up.sims[0]!.configPath], env),
    ]);
    for (const r of [devices, hosts, show, dry]) {
      expect(r.code, r.stderr).toBe(0);
      expect(widest(r.stdout), r.stdout).toBeLessThanOrEqual(120);
    }
    expect(widest(wide.stdout)).toBeGreaterThan(120);
    const lines = show.stdout.split('\n');
    const at = lines.findIndex((l) => l.startsWith('attributes:'));
    expect(lines[at + 1], show.stdout).toMatch(/^ {10,}\S+=/);
    const attributes = lines
      .slice(at)
      .filter((l, i) => i === 0 || /^ {10,}/.test(l))
      .map((l) => l.replace(/^attributes:\s+/, '').trim())
      .join(' ');
    for (const [k, v] of Object.entries(nvme.attributes)) expect(attributes).toContain(`${k}=${v}`);
  }, 60_000);
});
