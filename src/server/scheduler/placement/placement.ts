/**
 * Placement, started with the scheduler when configured (config.ts): the
 * credentials, the API at its pinned microversion, and one of the two modes —
 * report (reporter.ts: Berth's devices in Placement) or clean-one-time-use
 * (one-time-use.ts: Nova's devices scrubbed and returned). The rest of the
 * scheduler sees only the PlacementPort it returns.
 *
 * At start Placement is asked for its versions: a server older than the
 * pinned microversion, credentials Keystone refuses, or (clean-one-time-use)
 * a Placement that does not know HW_PCI_ONE_TIME_USE stop the scheduler from
 * starting with the reason. A Placement that does not answer does not: Berth
 * starts, works, and catches up when it answers.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { ConfigError } from '../../../errors.js';
import { PINNED_MICROVERSION, PlacementApi, PlacementUnreachable } from './api.js';
import type { PlacementOptions } from './config.js';
import { PlacementConnection } from './connection.js';
import { AppCredential, KeystoneRefused, NoAuth, StaticToken, type TokenSource } from './keystone.js';
import { PlacementMetrics } from './metrics.js';
import { ONE_TIME_USE_TRAIT } from './names.js';
import { OneTimeUseCleaner } from './one-time-use.js';
import type { PlacementPort, PlacementStatus, SchedulerSide } from './port.js';
import { Reporter } from './reporter.js';

/** The credentials `a` describe (Placement's; the Cyborg API's toward Keystone and Nova too). */
export function tokenSource(a: PlacementOptions['auth'], timeoutSeconds: number): TokenSource {
  if (a.type === 'noauth') return new NoAuth(a.user);
  if (a.type === 'token') return new StaticToken(a.token);
  const { type: _t, ...rest } = a;
  return new AppCredential({ ...rest, timeoutMs: timeoutSeconds * 1000 });
}

export async function startPlacement(
  options: PlacementOptions,
  side: SchedulerSide,
  deps: { logger: Logger; registry: Registry; fetch?: typeof fetch },
): Promise<PlacementPort> {
  const logger = deps.logger.child({ component: 'placement' });
  const auth = tokenSource(options.auth, options.timeoutSeconds);
  const api = new PlacementApi({
    url: options.url,
    auth,
    timeoutMs: options.timeoutSeconds * 1000,
    ...(deps.fetch ? { fetch: deps.fetch } : {}),
  });
  const conn = new PlacementConnection(api, logger);
  try {
    await conn.ready();
    if (options.mode === 'clean-one-time-use' && !conn.standardTraits.has(ONE_TIME_USE_TRAIT)) {
      throw new ConfigError(
        `Placement at ${api.url} does not know the trait ${ONE_TIME_USE_TRAIT} (its os-traits predate Nova's one-time-use ` +
          'devices, Nova 2025.1): --placement-mode clean-one-time-use has nothing to clean there',
      );
    }
  } catch (err) {
    if (err instanceof ConfigError) throw new ConfigError(`placement: ${err.message}`);
    if (err instanceof PlacementUnreachable && err.cause instanceof KeystoneRefused) {
      throw new ConfigError(`placement: ${err.message}`);
    }
    if (!(err instanceof PlacementUnreachable)) throw err;
    conn.down(err, () => 'nothing written yet');
    logger.warn('Placement does not answer at start: Berth serves, and reports to Placement once it answers');
  }
  const nodename = (host: string) => options.computeNodes[host] ?? host;
  const hostByNodename = new Map(Object.entries(options.computeNodes).map(([h, n]) => [n, h]));
  const common = {
    conn,
    side,
    logger,
    nodename,
    pollMs: options.pollSeconds * 1000,
    retryMaxMs: options.retryMaxSeconds * 1000,
  };
  let metrics: PlacementMetrics | null = null;
  const onChanges = (c: Parameters<PlacementMetrics['count']>[0]) => metrics?.count(c);
  const reporter =
    options.mode === 'report'
      ? new Reporter({
          ...common,
          createRoots: options.createRoots,
          hostOf: (n: string) => hostByNodename.get(n) ?? n,
          resyncMs: options.resyncSeconds * 1000,
          driftMs: options.driftSeconds * 1000,
          onChanges,
          onDriftRepaired: () => metrics?.driftRepaired(),
        })
      : null;
  const cleaner =
    options.mode === 'clean-one-time-use' ? new OneTimeUseCleaner({ ...common, onChanges }) : null;
  const status = (): PlacementStatus => {
    const down = !conn.reachable;
    return {
      mode: options.mode,
      url: api.url || '(from the Keystone catalog, not read yet)',
      microversion: PINNED_MICROVERSION,
      serverMaxVersion: conn.serverMaxVersion,
      credentials: auth.describe,
      reachable: conn.reachable,
      lastError: conn.lastError,
      unreachableSince: conn.unreachableSince?.toISOString() ?? null,
      lastContactAt: conn.lastContactAt?.toISOString() ?? null,
      appliedRevision: reporter?.appliedRevision ?? 0,
      storeRevision: reporter?.storeRevision ?? 0,
      pendingProviders: reporter?.pendingCount ?? cleaner?.roundsInProgress ?? 0,
      lagSeconds: reporter
        ? reporter.lagSeconds
        : down && conn.unreachableSince
          ? (Date.now() - conn.unreachableSince.getTime()) / 1000
          : 0,
      lastFullSyncAt: (reporter ?? cleaner)?.lastFullSyncAt?.toISOString() ?? null,
      problems: reporter?.problemList() ?? cleaner?.problemList() ?? [],
      held: reporter?.heldList() ?? [],
      scrubsInProgress: cleaner?.roundsInProgress ?? 0,
      generationConflicts: (reporter ?? cleaner)?.generationConflicts ?? 0,
    };
  };
  metrics = new PlacementMetrics(deps.registry, status);
  logger.info(
    { mode: options.mode, url: api.url, credentials: auth.describe, createRoots: options.createRoots },
    `Placement ${options.mode === 'report' ? 'reporting' : 'one-time-use cleaning for Nova'} started`,
  );
  return {
    mode: options.mode,
    status,
    deviceProvider: (d) => (reporter ? reporter.deviceProvider(d) : (cleaner?.deviceProvider(d) ?? null)),
    devicesOfProvider: async (uuid, near) =>
      reporter ? reporter.devicesOfProvider(uuid, near) : (cleaner?.devicesOfProvider(uuid) ?? []),
    sync: ({ dryRun }) => (reporter ? reporter.sync(dryRun) : cleaner!.sync(dryRun)),
    hostConnection: (host, connected) => reporter?.hostConnection(host, connected),
    async heldOutside(d) {
      if (!cleaner) return null;
      const rp = cleaner.deviceProvider(d);
      if (!rp) return 'Nova may be using it: its Placement provider has not been read yet';
      try {
        const { consumers } = await api.allocations(rp.providerUuid);
        const held = Object.keys(consumers);
        return held.length > 0
          ? `Nova uses it: Placement holds allocations of ${held.join(', ')} against provider ${rp.providerName}`
          : null;
      } catch (err) {
        return `Placement cannot say whether Nova uses it (${(err as Error).message})`;
      }
    },
    start() {
      reporter?.start();
      cleaner?.start();
    },
    async stop() {
      await reporter?.stop();
      await cleaner?.stop();
    },
  };
}
