/**
 * The CLI in production: a scheduler and an agent started from the command
 * line over mutual TLS, identified by certificate alone (`--cert-roles`, no
 * token anywhere), certificates made by openssl at run time. Every client
 * command takes its TLS files from flags, the environment or the client
 * configuration (`berth config set`); a TLS mismatch is one line saying what
 * is wrong and what to give; the servers' logs are JSON lines only (no Node
 * warning about an IP address as TLS server name), one `component` each; and
 * `-o yaml` reads back with the same types in a YAML 1.1 reader (PyYAML).
 */
import { execFile } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import { createLogger } from '../../src/logging.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { buildSimHost, demoHostDefinition } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv, type Result } from '../helpers/berth-cli.js';
import { type Leaf, makeCa } from '../helpers/certs.js';
import { available, openssl, PYTHON, pythonYaml } from '../helpers/prerequisites.js';
import { BerthProcess, freePort, stopAllProcesses } from '../helpers/processes.js';
import { eventually } from '../helpers/wait.js';

const usable = available(openssl(), 'the CLI over TLS');
const haveYaml = available(pythonYaml(), 'the YAML 1.1 reader check');
const HOST = 'tls-e2e-host';

/** The error contract: exactly one line on stderr. */
const oneLine = (r: Result) => {
  const lines = r.stderr.trimEnd().split('\n');
  expect(lines, r.stderr).toHaveLength(1);
  return lines[0]!;
};

describe.skipIf(!usable)('the CLI against a scheduler and an agent on mutual TLS, certificates only', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let scheduler: BerthProcess;
  let agent: BerthProcess;
  let plain: Scheduler;
  let ca: string;
  let operator: Leaf;
  let stranger: Leaf;
  let rogueOperator: Leaf;
  let schedulerCert: Leaf;
  let env: NodeJS.ProcessEnv;
  const tlsFlags = () => ['--tls-ca', ca, '--tls-cert', operator.cert, '--tls-key', operator.key];

  beforeAll(async () => {
    dir = await tempDir('berth-cli-tls-');
    const certs = join(dir.path, 'certs');
    await mkdir(certs);
    const good = await makeCa(certs, 'berth-ca');
    const rogue = await makeCa(certs, 'rogue-ca');
    ca = good.ca;
    schedulerCert = await good.leaf('berth-scheduler', [
      'IP:127.0.0.1',
      'DNS:localhost',
      'DNS:scheduler.test',
    ]);
    const agentCert = await good.leaf(HOST, ['IP:127.0.0.1', `DNS:${HOST}`]);
    operator = await good.leaf('operator');
    stranger = await good.leaf('dashboard');
    rogueOperator = await rogue.leaf('operator');

    // Who is who, by certificate common name: the only credentials in this deployment.
    const schedulerRoles = join(dir.path, 'scheduler-roles.yaml');
    await writeFile(schedulerRoles, `operator: admin\n${HOST}: agent\n"*": reader\n`);
    const agentRoles = join(dir.path, 'agent-roles.yaml');
    await writeFile(agentRoles, 'berth-scheduler: scheduler\noperator: admin\n');

    scheduler = new BerthProcess({
      name: 'scheduler',
      args: [
        'scheduler',
        'serve',
        '--db',
        join(dir.path, 'sched.db'),
        '--listen',
        `127.0.0.1:${await freePort()}`,
        '--tls-cert',
        schedulerCert.cert,
        '--tls-key',
        schedulerCert.key,
        '--tls-ca',
        ca,
        '--cert-roles',
        schedulerRoles,
      ],
    });
    await scheduler.start();

    const sim = await buildSimHost(join(dir.path, 'host'), demoHostDefinition(HOST));
    const { auth: _none, ...simConfig } = sim.agentConfig as Record<string, unknown>;
    const agentConfig = join(dir.path, 'agent.yaml');
    // No auth section: --cert-roles gives the agent its callers by certificate.
    await writeFile(
      agentConfig,
      JSON.stringify({
        ...simConfig,
        scheduler: scheduler.endpoint,
        register_interval: 0.5,
        tls: { cert: agentCert.cert, key: agentCert.key, ca },
      }),
    );
    agent = new BerthProcess({
      name: 'agent',
      args: [
        'agent',
        'serve',
        '-c',
        agentConfig,
        '--listen',
        `127.0.0.1:${await freePort()}`,
        '--cert-roles',
        agentRoles,
      ],
    });
    await agent.start();

    plain = await Scheduler.start({
      listen: '127.0.0.1:0',
      logger: createLogger({ level: 'silent' }),
      auth: { mode: 'none' },
    });
    env = cliEnv(join(dir.path, 'client.yaml'));
    const sdk = new SchedulerClient({
      endpoint: scheduler.endpoint,
      tls: { ca: await readFile(ca), cert: await readFile(operator.cert), key: await readFile(operator.key) },
    });
    try {
      await eventually(
        () => sdk.devices.listDevices({ filter: { host: HOST } }),
        (r) => r.devices.length === 9,
        60_000,
      );
    } finally {
      sdk.close();
    }
  }, 180_000);
  afterAll(async () => {
    await plain?.stop();
    await stopAllProcesses();
    await dir?.cleanup();
  }, 30_000);

  it('every command speaks mutual TLS with the files from flags, the environment or berth config set', async () => {
    const [flags, fromEnv, health] = await Promise.all([
      berth(['device', 'list', '-o', 'json', '--endpoint', scheduler.endpoint, ...tlsFlags()], env),
      berth(['host', 'list', '-o', 'json', '--endpoint', scheduler.endpoint], {
        ...env,
        BERTH_TLS_CA: ca,
        BERTH_TLS_CERT: operator.cert,
        BERTH_TLS_KEY: operator.key,
      }),
      // The scheduler unit's start gate: the scheduler's own certificate, a name it carries.
      berth(['health', '--endpoint', scheduler.endpoint.replace('127.0.0.1', '0.0.0.0'), '--wait', '10'], {
        ...env,
        BERTH_TLS_CA: ca,
        BERTH_TLS_CERT: schedulerCert.cert,
        BERTH_TLS_KEY: schedulerCert.key,
        BERTH_TLS_SERVER_NAME: 'scheduler.test',
      }),
    ]);
    expect(flags.code, flags.stderr).toBe(0);
    expect(JSON.parse(flags.stdout)).toHaveLength(9);
    expect(fromEnv.code, fromEnv.stderr).toBe(0);
    expect(JSON.parse(fromEnv.stdout)).toMatchObject([{ name: HOST, connected: true }]);
    expect(health.code, health.stderr).toBe(0);
    expect(health.stdout.trim()).toBe(`${scheduler.endpoint}: SERVING`);
    // Nothing on stderr: no Node warning about an IP address as TLS server name (DEP0123).
    for (const r of [flags, fromEnv, health]) expect(r.stderr).toBe('');

    // Written once with berth config set (checked against the scheduler first), then no flags at all.
    const set = await berth(
      ['config', 'set', '--endpoint', `https://${scheduler.endpoint}`, ...tlsFlags()],
      env,
    );
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toMatch(/a Berth scheduler answers \(TLS, 1 host\)/);
    const [list, show] = await Promise.all([berth(['device', 'list'], env), berth(['config', 'show'], env)]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout.trimEnd().split('\n'), list.stdout).toHaveLength(10);
    expect(show.stdout).toMatch(/^tls: +on \(https:\/\/ in endpoint in \S+, tls\.ca in/m);
    // An admin action, by certificate alone.
    const disable = await berth(['device', 'disable', `${HOST}/0000:3b:02.0`, '-o', 'json'], env);
    expect(disable.code, disable.stderr).toBe(0);
    expect(JSON.parse(disable.stdout)).toMatchObject({ status: 'maintaining' });
    // Another certificate from the CA is a reader.
    const reader = await berth(['device', 'enable', `${HOST}/0000:3b:02.0`], {
      ...env,
      BERTH_TLS_CERT: stranger.cert,
      BERTH_TLS_KEY: stranger.key,
    });
    expect(oneLine(reader)).toMatch(/^berth: PERMISSION_DENIED: /);
    expect((await berth(['device', 'enable', `${HOST}/0000:3b:02.0`], env)).code).toBe(0);
  }, 180_000);

  it('says in one line what is wrong when TLS is on one side only, or the certificates do not match', async () => {
    const ep = scheduler.endpoint;
    const bare = cliEnv(join(dir.path, 'none.yaml'));
    const [plaintext, noClientCert, noCa, wrongName, rogue, tlsToPlain, healthPlain] = await Promise.all([
      berth(['device', 'list', '--endpoint', ep], bare),
      berth(['device', 'list', '--endpoint', ep, '--tls-ca', ca], bare),
      berth(
        [
          'device',
          'list',
          '--endpoint',
          `https://${ep}`,
          '--tls-cert',
          operator.cert,
          '--tls-key',
          operator.key,
        ],
        bare,
      ),
      berth(['device', 'list', '--endpoint', ep, ...tlsFlags(), '--tls-server-name', 'other.test'], bare),
      berth(
        [
          'device',
          'list',
          '--endpoint',
          ep,
          '--tls-ca',
          ca,
          '--tls-cert',
          rogueOperator.cert,
          '--tls-key',
          rogueOperator.key,
        ],
        bare,
      ),
      berth(['device', 'list', '--endpoint', plain.address, '--tls-ca', ca], bare),
      berth(['health', '--endpoint', ep], bare),
    ]);
    for (const r of [plaintext, noClientCert, noCa, wrongName, rogue, tlsToPlain])
      expect(r.code, r.stderr).toBe(3);
    expect(oneLine(plaintext)).toBe(
      `berth: UNAVAILABLE: ${ep} speaks TLS, and this client connected in plaintext: give the CA with --tls-ca ($BERTH_TLS_CA, or tls.ca in ${join(dir.path, 'none.yaml')}), or https://${ep} for a certificate from a public CA`,
    );
    expect(oneLine(noClientCert)).toMatch(
      new RegExp(
        `^berth: UNAVAILABLE: ${ep} requires a client certificate \\(mutual TLS\\): give --tls-cert and --tls-key`,
      ),
    );
    expect(oneLine(noCa)).toMatch(
      /certificate is not signed by a CA this client trusts \(the system's roots\): give the CA that signed it with --tls-ca/,
    );
    expect(oneLine(wrongName)).toMatch(
      /certificate is not for the name dialled \(it is for IP Address:127\.0\.0\.1, DNS:localhost, DNS:scheduler\.test, not other\.test\): give a name it carries with --tls-server-name/,
    );
    expect(oneLine(rogue)).toMatch(
      new RegExp(`^berth: UNAVAILABLE: ${ep} refused this client's certificate`),
    );
    expect(oneLine(tlsToPlain)).toBe(
      `berth: UNAVAILABLE: ${plain.address} does not speak TLS, and this client does (--tls-ca): use http://${plain.address} or drop the TLS settings, or enable TLS on the server`,
    );
    expect(healthPlain.code).toBe(3);
    expect(oneLine(healthPlain)).toMatch(
      new RegExp(
        `^berth: ${ep} is not serving: UNAVAILABLE: ${ep} speaks TLS, and this client connected in plaintext`,
      ),
    );
    // http:// says plaintext: a TLS flag beside it is a usage error (exit 2).
    const contradiction = await berth(['device', 'list', '--endpoint', `http://${ep}`, '--tls-ca', ca], bare);
    expect(contradiction.code).toBe(2);
    expect(oneLine(contradiction)).toMatch(/says plaintext \(http:\/\/\), but --tls-ca asks for TLS/);
  }, 180_000);

  it('a certificate-only scheduler without certificate roles refuses to start, naming the flag', async () => {
    const r = await berth(
      [
        'scheduler',
        'serve',
        '--db',
        join(dir.path, 'x.db'),
        '--listen',
        '127.0.0.1:0',
        '--tls-cert',
        schedulerCert.cert,
        '--tls-key',
        schedulerCert.key,
        '--tls-ca',
        ca,
      ],
      env,
    );
    expect(r.code).toBe(2);
    expect(oneLine(r)).toMatch(/no certificate has a role: give --cert-roles FILE/);
    const badRole = join(dir.path, 'bad-roles.yaml');
    await writeFile(badRole, 'operator: superuser\n');
    const r2 = await berth(
      [
        'scheduler',
        'serve',
        '--db',
        join(dir.path, 'x.db'),
        '--listen',
        '127.0.0.1:0',
        '--tls-cert',
        schedulerCert.cert,
        '--tls-key',
        schedulerCert.key,
        '--tls-ca',
        ca,
        '--cert-roles',
        badRole,
      ],
      env,
    );
    expect(r2.code).toBe(2);
    expect(oneLine(r2)).toMatch(new RegExp(`--cert-roles ${badRole}: operator: unknown role "superuser"`));
  }, 60_000);

  it('the servers log JSON lines only, each with one component', () => {
    for (const p of [scheduler, agent]) {
      const stderr = p.output().split('--- ' + p.spec.name + ' stderr ---\n')[1] ?? '';
      const lines = stderr.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('=== start'));
      expect(lines.length).toBeGreaterThan(2);
      for (const l of lines) {
        expect(() => JSON.parse(l), `${p.spec.name}: not JSON: ${l}`).not.toThrow();
        expect(l.match(/"component":/g)?.length ?? 0, l).toBeLessThanOrEqual(1);
      }
      expect(stderr).not.toContain('DEP0123');
    }
  });

  it.skipIf(!haveYaml)(
    '-o yaml reads back with its types in a YAML 1.1 reader (PyYAML)',
    async () => {
      const r = await berth(['device', 'list', '-o', 'yaml', '--host', HOST], env);
      expect(r.code, r.stderr).toBe(0);
      const checked = await new Promise<string>((resolve, reject) =>
        execFile(
          PYTHON,
          [
            '-c',
            [
              'import sys, yaml, json',
              'docs = yaml.safe_load(sys.stdin)',
              'bad = [(d["address"], k, repr(v)) for d in docs for k, v in d.items()',
              '       if k in ("address", "vendor_id", "product_id", "class_code", "uuid", "host", "device_state", "status", "health", "resource_class", "cleanup_action", "physfn", "kernel_driver")',
              '       and not isinstance(v, str)]',
              'bad += [(d["address"], k, repr(v)) for d in docs for k in ("managed", "burned", "allocatable") if not isinstance(d[k], bool)]',
              'print(json.dumps({"n": len(docs), "bad": bad, "addresses": sorted(d["address"] for d in docs)}))',
            ].join('\n'),
          ],
          { timeout: 30_000 },
          (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)),
        ).stdin!.end(r.stdout),
      );
      const out = JSON.parse(checked) as { n: number; bad: unknown[]; addresses: string[] };
      expect(out.bad).toEqual([]);
      expect(out.n).toBe(9);
      // 0000:3b:02.0 and friends are YAML 1.1 sexagesimal numbers unless quoted.
      expect(out.addresses).toContain('0000:3b:02.0');
    },
    60_000,
  );
});
