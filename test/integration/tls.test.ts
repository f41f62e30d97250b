/**
 * TLS and mutual TLS with certificates made at run time by openssl: a client
 * with a certificate from the CA works, one without a certificate or with one
 * from another CA is refused at the handshake; a real agent and the scheduler
 * talk over mTLS in both directions, identified by certificate CN alone.
 */
import { execFileSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import { createLogger } from '../../src/logging.js';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { hostName } from '../../src/server/scheduler/domain/fixtures.support.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { buildSimHost, demoHostDefinition } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { captureLogs, type LogLine } from '../helpers/logs.js';
import { available, openssl } from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const OPENSSL = available(openssl(), 'the TLS tests');

const quiet = () => createLogger({ level: process.env.BERTH_LOG_LEVEL ?? 'silent' });

const ssl = (dir: string, args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });

/** A CA, and `leaf(name)` issuing a serverAuth+clientAuth cert for 127.0.0.1/localhost. */
async function makeCa(dir: string, ca: string) {
  ssl(dir, ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', `${ca}.key`]);
  ssl(dir, [
    'req',
    '-x509',
    '-new',
    '-key',
    `${ca}.key`,
    '-subj',
    `/CN=${ca}`,
    '-days',
    '2',
    '-out',
    `${ca}.crt`,
  ]);
  return {
    ca: join(dir, `${ca}.crt`),
    async leaf(cn: string) {
      const base = `${ca}-${cn}`;
      ssl(dir, ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', `${base}.key`]);
      ssl(dir, ['req', '-new', '-key', `${base}.key`, '-subj', `/CN=${cn}`, '-out', `${base}.csr`]);
      await writeFile(
        join(dir, `${base}.ext`),
        'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n',
      );
      ssl(dir, [
        'x509',
        '-req',
        '-in',
        `${base}.csr`,
        '-CA',
        `${ca}.crt`,
        '-CAkey',
        `${ca}.key`,
        '-CAcreateserial',
        '-days',
        '2',
        '-extfile',
        `${base}.ext`,
        '-out',
        `${base}.crt`,
      ]);
      return { cert: join(dir, `${base}.crt`), key: join(dir, `${base}.key`), ca: join(dir, `${ca}.crt`) };
    },
  };
}

describe.skipIf(!OPENSSL)('TLS and mutual TLS', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let good: Awaited<ReturnType<typeof makeCa>>;
  let other: Awaited<ReturnType<typeof makeCa>>;
  let scheduler: Scheduler;

  beforeAll(async () => {
    dir = await tempDir('berth-tls-');
    good = await makeCa(dir.path, 'berth-ca');
    other = await makeCa(dir.path, 'rogue-ca');
    const server = await good.leaf('berth-scheduler');
    scheduler = await Scheduler.start({
      listen: '127.0.0.1:0',
      logger: quiet(),
      tls: server,
      auth: { mode: 'token', certRoles: { operator: 'admin', '*': 'reader' } },
    });
  }, 30_000);
  afterAll(async () => {
    await scheduler?.stop();
    await dir?.cleanup();
  });

  const pems = async (f: { cert?: string; key?: string; ca: string }) => ({
    ca: await readFile(f.ca),
    ...(f.cert ? { cert: await readFile(f.cert) } : {}),
    ...(f.key ? { key: await readFile(f.key) } : {}),
  });

  async function outcome(tls: { ca?: Buffer; cert?: Buffer; key?: Buffer } | undefined): Promise<string> {
    const c = new SchedulerClient({
      endpoint: scheduler.address,
      timeoutMs: 3_000,
      retries: 1,
      ...(tls ? { tls } : {}),
    });
    try {
      await c.hosts.listHosts({});
      await c.profiles
        .createProfile({ name: 'tls-probe', groups: [] } as never)
        .catch((e: { codeName: string }) => {
          if (e.codeName === 'PERMISSION_DENIED') throw e;
        });
      return 'OK';
    } catch (e) {
      return (e as { codeName: string }).codeName;
    } finally {
      c.close();
    }
  }

  it('accepts a client certificate from the CA and maps its CN to a role', async () => {
    expect(await outcome(await pems(await good.leaf('operator')))).toBe('OK');
    // Any other CN from the CA is a reader: reads work, profile writes are refused.
    expect(await outcome(await pems(await good.leaf('dashboard')))).toBe('PERMISSION_DENIED');
  });

  it('refuses a client without a certificate, with one from another CA, and plaintext', async () => {
    expect(await outcome({ ca: await readFile(good.ca) })).toBe('UNAVAILABLE');
    const rogue = await other.leaf('operator');
    expect(await outcome({ ...(await pems(rogue)), ca: await readFile(good.ca) })).toBe('UNAVAILABLE');
    expect(await outcome(undefined)).toBe('UNAVAILABLE');
  });

  it('refuses a server whose certificate is from another CA (the client verifies too)', async () => {
    const c = await other.leaf('operator');
    expect(await outcome({ ...(await pems(await good.leaf('operator'))), ca: await readFile(c.ca) })).toBe(
      'UNAVAILABLE',
    );
  });

  /** The agent's log line for a registration the scheduler did not accept. */
  const refusedRegistration = (l: LogLine) => l.msg === 'cannot register with the scheduler; retrying';
  /** The scheduler's log line for a link to `host` that could not follow the agent. */
  const brokenLink = (host: string) => (l: LogLine) =>
    l.host === host && l.msg === 'inventory stream from the agent broke; reconnecting';

  /**
   * A scheduler and a real agent on a simulated host, each with its own
   * certificate; their logs are kept: a refusal is waited for in them
   * before checking that it changed nothing.
   */
  async function pair(schedulerCn: string, agentCa: 'good' | 'rogue', host: string, certHost?: string) {
    const schedCert = await good.leaf(schedulerCn);
    // The agent's certificate names its host (invariant 10).
    const agentCert = await (agentCa === 'good' ? good : other).leaf(certHost ?? host);
    const schedLogs = captureLogs();
    const agentLogs = captureLogs();
    const sched = await Scheduler.start({
      listen: '127.0.0.1:0',
      logger: schedLogs.logger,
      heartbeatSeconds: 1,
      tls: schedCert,
      auth: { mode: 'token', certRoles: { '*': 'agent' } },
    });
    const sim = await buildSimHost(join(dir.path, host), demoHostDefinition(host));
    const config = parseAgentConfig(
      {
        ...sim.agentConfig,
        scheduler: sched.address,
        register_interval: 0.3,
        discovery_interval: 3600,
        // The agent trusts the good CA (verifying the scheduler and its callers).
        tls: { cert: agentCert.cert, key: agentCert.key, ca: good.ca },
        auth: { cert_roles: { 'berth-scheduler': 'scheduler' } },
      },
      {},
      dir.path,
    );
    const agent = await Agent.start({ config, bootIdFile: sim.bootIdFile, logger: agentLogs.logger });
    return {
      sched,
      agent,
      schedLogs,
      agentLogs,
      host: () => sched.useCases.listHosts().then(({ hosts: hs }) => hs.find((h) => h.name === host)),
      stop: async () => {
        await agent.stop();
        await sched.stop();
      },
    };
  }

  it('runs agent <-> scheduler over mTLS both ways, identified by certificate alone', async () => {
    const p = await pair('berth-scheduler', 'good', 'tls-host');
    try {
      await p.agent.registered;
      await eventually(p.host, (h) => h?.connected === true, 15_000);
    } finally {
      await p.stop();
    }
  }, 60_000);

  it('refuses an agent whose certificate is from another CA', async () => {
    const p = await pair('berth-scheduler', 'rogue', 'rogue-agent');
    try {
      // Two registrations tried and refused (at the handshake): neither made a host.
      await p.agentLogs.waitFor(refusedRegistration, { count: 2, what: 'refused registrations' });
      expect(await p.host()).toBeUndefined();
    } finally {
      await p.stop();
    }
  }, 60_000);

  it('refuses an agent whose certificate names another host (impersonation)', async () => {
    const p = await pair('berth-scheduler', 'good', 'victim-host', 'attacker-host');
    try {
      // Two registrations answered with a refusal: neither made a host.
      const refused = await p.agentLogs.waitFor(refusedRegistration, {
        count: 2,
        what: 'refused registrations',
      });
      expect(String(refused[0]!.err)).toMatch(/PERMISSION_DENIED|7 /);
      expect(await p.host()).toBeUndefined();
    } finally {
      await p.stop();
    }
  }, 60_000);

  it("a host that registers another agent's endpoint as its own gets no link (mutual TLS alone)", async () => {
    const p = await pair('berth-scheduler', 'good', 'endpoint-owner');
    try {
      await p.agent.registered;
      await eventually(p.host, (h) => h?.connected === true, 15_000);
      // attacker-host holds a good certificate for itself and registers the victim's agent as its endpoint.
      const attacker = await good.leaf('attacker-host');
      const c = new SchedulerClient({ endpoint: p.sched.address, retries: 1, tls: await pems(attacker) });
      try {
        await c.registration.register({
          host: hostName('attacker-host'),
          endpoint: p.agent.address,
          bootId: 'b',
          epoch: 'e',
          agentVersion: '0',
          features: ['inventory.v1', 'cleanup.v1'],
          drivers: ['nvme'],
          heldDevices: [],
          mediaRecords: [],
        });
      } finally {
        c.close();
      }
      const attackerHost = () =>
        p.sched.useCases.listHosts().then(({ hosts: hs }) => hs.find((h) => h.name === 'attacker-host'));
      expect(await attackerHost()).toBeDefined();
      // The scheduler dials the victim's agent as attacker-host: its certificate is for endpoint-owner, so no link.
      await p.schedLogs.waitFor(brokenLink('attacker-host'), {
        count: 2,
        what: "attacker-host's link failing",
      });
      expect((await attackerHost())!.connected).toBe(false);
      const stolen = await p.sched.useCases.listDevices({ host: hostName('attacker-host') });
      expect(stolen.devices).toEqual([]);
      // The victim's own link is untouched.
      expect((await p.host())!.connected).toBe(true);
    } finally {
      await p.stop();
    }
  }, 60_000);

  it('an agent refuses a scheduler whose certificate identity has no role there', async () => {
    const p = await pair('not-the-scheduler', 'good', 'picky-agent');
    try {
      await p.agent.registered;
      // The scheduler dialled the agent twice and was refused both times.
      await p.schedLogs.waitFor(brokenLink('picky-agent'), { count: 2, what: "picky-agent's link failing" });
      const h = await p.host();
      expect(h).toBeDefined();
      expect(h!.connected).toBe(false);
    } finally {
      await p.stop();
    }
  }, 60_000);
});
