/**
 * Placement's metrics, on the scheduler's registry (docs/operator-guide.md
 * "Metrics"). Gauges are read from the status at scrape time, so they never
 * drift from what `berth placement status` says.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { PlacementChange, PlacementStatus } from './port.js';

export class PlacementMetrics {
  private readonly changes: Counter<'action'>;
  private readonly drift: Counter;

  constructor(registry: Registry, status: () => PlacementStatus) {
    const gauge = (name: string, help: string, read: (s: PlacementStatus) => number) =>
      new Gauge({
        name,
        help,
        registers: [registry],
        collect() {
          this.set(read(status()));
        },
      });
    gauge('berth_placement_reachable', '1 while Placement answers Berth, 0 while it does not', (s) =>
      s.reachable ? 1 : 0,
    );
    gauge(
      'berth_placement_lag_seconds',
      'Age of the oldest device change Placement does not show yet (0 = in step)',
      (s) => s.lagSeconds,
    );
    gauge(
      'berth_placement_pending_providers',
      'Providers with a change Placement does not show yet',
      (s) => s.pendingProviders,
    );
    gauge(
      'berth_placement_problem_providers',
      "Providers Berth cannot make right (not Berth's, no compute node provider, refused by Placement, a failed scrub)",
      (s) => s.problems.length,
    );
    new Gauge({
      name: 'berth_placement_held_providers',
      help: 'Providers of devices that went away, kept because Placement holds allocations against them (1 per provider)',
      labelNames: ['provider', 'host'],
      registers: [registry],
      collect() {
        this.reset();
        for (const h of status().held) this.set({ provider: h.provider, host: h.host }, 1);
      },
    });
    gauge(
      'berth_placement_scrubs_in_progress',
      'Nova one-time-use providers Berth is scrubbing before it returns them (mode clean-one-time-use)',
      (s) => s.scrubsInProgress,
    );
    this.changes = new Counter({
      name: 'berth_placement_changes_total',
      help: 'Changes Berth made in Placement, by action (create, update, delete, keep, scrub, unreserve, blocked)',
      labelNames: ['action'],
      registers: [registry],
    });
    this.drift = new Counter({
      name: 'berth_placement_drift_repairs_total',
      help: 'Providers another writer changed (reserved, inventory, traits, deleted) that Berth wrote back between full resyncs (mode report)',
      registers: [registry],
    });
  }

  /** A drift check found a provider changed by someone else, and Berth wrote it back. */
  driftRepaired(): void {
    this.drift.inc();
  }

  count(changes: readonly PlacementChange[]): void {
    for (const c of changes) this.changes.inc({ action: c.action });
  }
}
