/**
 * `berth health`: asks a scheduler or an agent for grpc.health.v1 status, and
 * with `--wait` keeps asking until it says SERVING. systemd units gate their
 * start on it (`ExecStartPost=berth health -c /etc/berth/agent.yaml --wait 60`):
 * the unit becomes active only once the process serves. Health is open (no
 * token); over TLS the probe of an agent uses its own certificate and CA, and
 * a scheduler's probe takes TLS as every client command does: flags,
 * BERTH_TLS_* (the scheduler unit's drop-in sets them), the client configuration.
 *
 * Exit codes as every command: 0 SERVING, 1 answered but not SERVING,
 * 2 usage/configuration error, 3 could not be reached before the wait ran out.
 */
import {
  Channel,
  type Client,
  status as grpcStatus,
  makeGenericClientConstructor,
  type ServiceError,
} from '@grpc/grpc-js';
import type { Command } from 'commander';
import { service as healthService } from 'grpc-health-check';
import { ConfigError } from '../../errors.js';
import { loadAgentConfig } from '../../server/agent/config.js';
import { loadTls } from '../../server/grpc/tls.js';
import { type ClientTls, channelCredentials, channelOptions, dialTarget } from '../../transport/channel.js';
import {
  type ClientFlagValues,
  loadClientTls,
  type ResolvedClient,
  resolveClient,
} from '../client-config.js';
import { SchedulerClient } from '../sdk.js';
import { EXIT_CODE, oneLine } from './command-errors.js';
import { connectionFlags, connectionOptions, explainConnection } from './connection.js';
import { placementHealthLine, placementStatusView } from './placement-commands.js';

interface HealthFlags extends ClientFlagValues {
  config?: string;
  service: string;
  wait: string;
}

type Check = (
  req: { service: string },
  opts: { deadline: number },
  cb: (err: ServiceError | null, res: { status: string | number }) => void,
) => void;

/** A wildcard listen address is probed on the loopback of the same family. */
export function probeAddress(listen: string): string {
  if (listen.startsWith('0.0.0.0:')) return `127.0.0.1:${listen.slice('0.0.0.0:'.length)}`;
  if (listen.startsWith('[::]:')) return `[::1]:${listen.slice('[::]:'.length)}`;
  return listen;
}

function parseWait(v: string): number {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < 0 || n > 3600) {
    throw new ConfigError(`--wait: expected a number of seconds in [0, 3600], got ${JSON.stringify(v)}`);
  }
  return n * 1000;
}

/**
 * Why a scheduler says NOT_SERVING, when it is its database (damaged, out of
 * reach): the health protocol carries no reason, but every call then fails
 * with one (STORE_DAMAGED, STORE_UNAVAILABLE), so one cheap call asks.
 * Undefined when the answer says nothing of the store (or there is no scheduler).
 */
async function storeReason(endpoint: string, token: string | undefined, tls: ClientTls | undefined) {
  const client = new SchedulerClient({
    endpoint,
    ...(token ? { token } : {}),
    ...(tls ? { tls } : {}),
    timeoutMs: 5_000,
    retries: 1,
  });
  try {
    await client.hosts.listHosts({ pageSize: 1, pageToken: '' });
    return undefined;
  } catch (err) {
    const reason = (err as { reason?: string }).reason ?? '';
    return reason.startsWith('STORE_') ? `${reason}: ${(err as Error).message}` : undefined;
  } finally {
    client.close();
  }
}

/**
 * The Placement line of a scheduler that reports to Placement: in step, or how
 * far behind and why (Berth keeps serving while Placement is away, so this
 * never changes the exit code). Nothing for an agent, or a scheduler without
 * Placement, or one that will not say (no token).
 */
async function placementLine(
  endpoint: string,
  token: string | undefined,
  tls: ClientTls | undefined,
): Promise<string | undefined> {
  const client = new SchedulerClient({
    endpoint,
    ...(token ? { token } : {}),
    ...(tls ? { tls } : {}),
    timeoutMs: 5_000,
    retries: 1,
  });
  try {
    const { status } = await client.placement.getPlacementStatus({});
    return status ? placementHealthLine(placementStatusView(status)) : undefined;
  } catch {
    return undefined;
  } finally {
    client.close();
  }
}

/** What to probe and how: an agent's configuration (-c), or the client settings (flags, environment, file). */
async function target(o: HealthFlags): Promise<{
  endpoint: string;
  tls: ClientTls | undefined;
  token?: string;
  resolved: Pick<ResolvedClient, 'endpoint' | 'endpointSource' | 'configPath' | 'tls'>;
}> {
  if (o.config) {
    const config = await loadAgentConfig(o.config);
    const endpoint = probeAddress(config.listen);
    const flagged = o.tlsCa || o.tlsCert || o.tlsKey;
    const files = flagged ? { ca: o.tlsCa, cert: o.tlsCert, key: o.tlsKey } : config.tls;
    let tls: ClientTls | undefined;
    if (files) {
      tls = { ...(await loadTls(files)) };
      // The agent's certificate names the address the scheduler dials (advertise), not the loopback probed.
      const advertised = config.advertise
        ?.slice(0, config.advertise.lastIndexOf(':'))
        .replace(/^\[|\]$/g, '');
      const serverName = o.tlsServerName ?? process.env.BERTH_TLS_SERVER_NAME ?? advertised;
      if (serverName) tls.serverName = serverName;
    }
    const from = flagged ? ['--tls-*'] : [`tls in ${o.config}`];
    return {
      endpoint,
      tls,
      resolved: { endpoint, endpointSource: 'file', configPath: o.config, ...(tls ? { tls: { from } } : {}) },
    };
  }
  const resolved = await resolveClient(connectionFlags(o));
  const endpoint = resolved.endpoint.split(',').map(probeAddress).join(',');
  return {
    endpoint,
    tls: await loadClientTls(resolved.tls),
    ...(resolved.token ? { token: resolved.token } : {}),
    resolved: { ...resolved, endpoint },
  };
}

export function registerHealthCommands(program: Command): void {
  connectionOptions(
    program
      .command('health')
      .description('ask a scheduler or an agent whether it serves (grpc.health.v1); exit 0 when SERVING'),
  )
    .option('-c, --config <file>', 'probe the agent of this configuration (its listen address and TLS files)')
    .option(
      '--service <name>',
      'a service name, e.g. berth.agent.v1.AgentService ("" = the whole server)',
      '',
    )
    .option('--wait <seconds>', 'keep asking until SERVING or this many seconds have passed', '0')
    .action(async (o: HealthFlags) => {
      const waitMs = parseWait(o.wait);
      const { endpoint, tls, token, resolved } = await target(o);
      const HealthClient = makeGenericClientConstructor(healthService, 'Health');
      const channel = new Channel(dialTarget(endpoint), channelCredentials(tls), channelOptions(tls));
      const client = new HealthClient(endpoint, channelCredentials(undefined), {
        channelOverride: channel,
      }) as unknown as Client & { check: Check };
      const deadline = Date.now() + waitMs;
      try {
        for (;;) {
          const answer = await new Promise<{ status?: string; error?: ServiceError }>((resolve) =>
            client.check({ service: o.service }, { deadline: Date.now() + 5_000 }, (error, res) =>
              resolve(error ? { error } : { status: String(res.status) }),
            ),
          );
          if (answer.status === 'SERVING') {
            console.log(`${endpoint}: SERVING`);
            const line = o.config ? undefined : await placementLine(endpoint, token, tls);
            if (line) console.log(line);
            return;
          }
          if (Date.now() >= deadline) {
            const why =
              answer.status === 'NOT_SERVING' && !o.config
                ? await storeReason(endpoint, token, tls)
                : undefined;
            let what: string;
            if (answer.error) {
              const codeName = grpcStatus[answer.error.code] ?? String(answer.error.code);
              const explained = await explainConnection(
                { codeName, message: answer.error.details },
                resolved,
              );
              what = `${codeName}: ${explained ?? oneLine(answer.error.details)}`;
            } else {
              what = `${answer.status}${why ? ` (${why})` : ''}`;
            }
            console.error(`berth: ${endpoint}${o.service ? ` (${o.service})` : ''} is not serving: ${what}`);
            process.exitCode =
              answer.error && answer.error.code !== grpcStatus.NOT_FOUND
                ? EXIT_CODE.unavailable
                : EXIT_CODE.failed;
            return;
          }
          await new Promise((r) => setTimeout(r, Math.min(500, Math.max(0, deadline - Date.now()))));
        }
      } finally {
        client.close();
      }
    });
}
