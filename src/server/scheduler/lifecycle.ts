/**
 * The scheduler's lifecycle as one explicit state, with the reason when it
 * serves nothing useful:
 *
 *   starting → serving ⇄ degraded(database_unreachable) → stopping → stopped
 *                    ↘ degraded(store_damaged)  (until a restart: the database must be restored)
 *
 * Health (grpc.health.v1) is SERVING exactly in `serving`; every transition is
 * one log line that names the state and the reason. A damaged store outranks
 * an unreachable one (it does not heal by answering again).
 */

/** Why a scheduler that runs does not serve. */
export type DegradedReason =
  /** The database was found damaged: every call is refused (STORE_DAMAGED) until it is restored. */
  | 'store_damaged'
  /** A shared database does not answer: agents and load balancers go to another replica until it does. */
  | 'database_unreachable';

export type SchedulerState =
  | { readonly kind: 'starting' }
  | { readonly kind: 'serving' }
  | { readonly kind: 'degraded'; readonly reason: DegradedReason; readonly detail: string }
  | { readonly kind: 'stopping' }
  | { readonly kind: 'stopped' };

export type Transition = (next: SchedulerState, previous: SchedulerState) => void;

export class SchedulerLifecycle {
  private current: SchedulerState = { kind: 'starting' };
  private readonly listeners: Transition[] = [];

  get state(): SchedulerState {
    return this.current;
  }

  /** Whether the store was found damaged (nothing that writes should start). */
  get damaged(): boolean {
    return this.current.kind === 'degraded' && this.current.reason === 'store_damaged';
  }

  onTransition(listener: Transition): void {
    this.listeners.push(listener);
  }

  /** Started: serving, unless something degraded it meanwhile. */
  started(): void {
    if (this.current.kind === 'starting') this.go({ kind: 'serving' });
  }

  /** Something stops the scheduler serving (a damaged store is not superseded by an unreachable one). */
  degrade(reason: DegradedReason, detail: string): void {
    const c = this.current;
    if (c.kind === 'stopping' || c.kind === 'stopped') return;
    if (c.kind === 'degraded' && (c.reason === reason || c.reason === 'store_damaged')) return;
    this.go({ kind: 'degraded', reason, detail });
  }

  /** What degraded it is over: serving again (only for a reason that can heal). */
  recovered(reason: Exclude<DegradedReason, 'store_damaged'>): void {
    const c = this.current;
    if (c.kind === 'degraded' && c.reason === reason) this.go({ kind: 'serving' });
  }

  stopping(): void {
    if (this.current.kind !== 'stopping' && this.current.kind !== 'stopped') this.go({ kind: 'stopping' });
  }

  stopped(): void {
    if (this.current.kind !== 'stopped') this.go({ kind: 'stopped' });
  }

  private go(next: SchedulerState): void {
    const previous = this.current;
    this.current = next;
    for (const l of this.listeners) l(next, previous);
  }
}
