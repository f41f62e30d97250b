/** `berth placement status|sync`: how the scheduler keeps OpenStack Placement in step. */
import type { Command } from 'commander';
import type { PlacementChange, PlacementStatus } from '../../gen/berth/scheduler/v1/placement.js';
import { PlacementMode, placementModeToJSON } from '../../gen/berth/scheduler/v1/placement.js';
import { clientOptions, withClient } from './connection.js';
import { ago } from './format.js';
import { printList, render, renderRecord, renderTable } from './output.js';

const iso = (d: Date | undefined) => (d ? d.toISOString() : null);

export function placementStatusView(s: PlacementStatus) {
  return {
    mode:
      s.mode === PlacementMode.PLACEMENT_MODE_REPORT
        ? 'report'
        : s.mode === PlacementMode.PLACEMENT_MODE_CLEAN_ONE_TIME_USE
          ? 'clean-one-time-use'
          : placementModeToJSON(s.mode),
    url: s.url,
    microversion: s.microversion,
    server_max_version: s.serverMaxVersion,
    credentials: s.credentials,
    reachable: s.reachable,
    last_error: s.lastError,
    unreachable_since: iso(s.unreachableSince),
    last_contact_at: iso(s.lastContactAt),
    applied_revision: s.appliedRevision,
    store_revision: s.storeRevision,
    pending_providers: s.pendingProviders,
    lag_seconds: Math.round(s.lagSeconds * 10) / 10,
    last_full_sync_at: iso(s.lastFullSyncAt),
    problems: s.problems.map((p) => ({ provider: p.provider, host: p.host, note: p.note })),
    held: s.held.map((h) => ({ provider: h.provider, host: h.host, consumers: h.consumers })),
    scrubs_in_progress: s.scrubsInProgress,
    generation_conflicts: s.generationConflicts,
  };
}
export type PlacementStatusView = ReturnType<typeof placementStatusView>;

/** One line for `berth health`: in step, or how far behind and why. */
export function placementHealthLine(v: PlacementStatusView): string {
  const problems = v.problems.length ? `; ${v.problems.length} provider(s) Berth cannot make right` : '';
  const held = v.held.length ? `; ${v.held.length} kept for their allocations` : '';
  if (!v.reachable) {
    return `placement: NOT REACHABLE since ${v.unreachable_since ?? '?'}: ${v.last_error}; ${v.pending_providers} provider(s) behind, lag ${v.lag_seconds} s${problems}`;
  }
  if (v.pending_providers > 0 || v.lag_seconds > 0) {
    return `placement: catching up, ${v.pending_providers} provider(s) behind, lag ${v.lag_seconds} s${problems}${held}`;
  }
  return `placement: in step (${v.mode}, revision ${v.applied_revision}, last contact ${ago(v.last_contact_at)})${problems}${held}`;
}

export function changeView(c: PlacementChange) {
  return {
    action: c.action,
    provider: c.provider,
    provider_uuid: c.providerUuid,
    host: c.host,
    devices: c.deviceAddresses,
    details: c.details,
  };
}

export function registerPlacementCommands(program: Command): void {
  const placement = program
    .command('placement')
    .description('OpenStack Placement: what the scheduler reports there, and how far behind it is');

  clientOptions(
    placement.command('status').description('whether Placement answers, the lag, and the problems'),
  ).action(
    withClient(async (client, format) => {
      const v = placementStatusView((await client.placement.getPlacementStatus({})).status!);
      console.log(
        render(format, v, () =>
          [
            placementHealthLine(v),
            renderRecord({
              ...v,
              problems: v.problems.map((p) => `${p.provider}: ${p.note}`).join('\n') || 'none',
              held: v.held.map((h) => `${h.provider} (${h.consumers.join(', ')})`).join(', ') || 'none',
            }),
          ].join('\n'),
        ),
      );
    }),
  );

  clientOptions(
    placement
      .command('sync')
      .description(
        'compare everything with Placement now and write what differs (admin); --dry-run only shows it',
      )
      .option('--dry-run', 'show what Berth would change in Placement, change nothing'),
  ).action(
    withClient(async (client, format, o: { dryRun?: boolean }) => {
      const res = await client.placement.syncPlacement({ dryRun: o.dryRun === true });
      const rows = res.changes.map(changeView);
      if (rows.length === 0 && (format === 'table' || format === 'wide')) {
        console.log(
          o.dryRun ? 'Placement is in step: nothing to change' : 'Placement was in step: nothing changed',
        );
        return;
      }
      printList(format, rows, 'changes', (wide) =>
        renderTable(
          rows,
          [
            { header: o.dryRun ? 'would' : 'did', get: (c) => c.action },
            { header: 'provider', get: (c) => c.provider, shrink: true },
            { header: 'host', get: (c) => c.host },
            { header: 'what', get: (c) => c.details.join('; '), shrink: true },
            { header: 'uuid', get: (c) => c.provider_uuid, only: 'wide' },
            { header: 'devices', get: (c) => c.devices.join(', '), only: 'wide' },
          ],
          { wide },
        ),
      );
    }),
  );
}
