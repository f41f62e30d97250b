/**
 * A server's lifecycle as one explicit state, with the reason when it runs
 * but is degraded (the scheduler's and the agent's: docs/decisions.md 55):
 *
 *   starting → serving ⇄ degraded(reason) → stopping → stopped
 *
 * A reason the owner names permanent (a damaged store) does not heal and is
 * not superseded by another; a degraded server stays degraded for its first
 * reason until that one heals. Each transition goes to the listeners once (the
 * owner sets health and writes one log line from it).
 */

export type LifecycleState<R extends string> =
  | { readonly kind: 'starting' }
  | { readonly kind: 'serving' }
  | { readonly kind: 'degraded'; readonly reason: R; readonly detail: string }
  | { readonly kind: 'stopping' }
  | { readonly kind: 'stopped' };

export type Transition<R extends string> = (next: LifecycleState<R>, previous: LifecycleState<R>) => void;

export class Lifecycle<R extends string> {
  private current: LifecycleState<R> = { kind: 'starting' };
  private readonly listeners: Transition<R>[] = [];

  constructor(
    /** Reasons that do not heal (until a restart). */
    private readonly permanent: readonly R[] = [],
  ) {}

  get state(): LifecycleState<R> {
    return this.current;
  }

  /** Whether the server is degraded for `reason` now. */
  is(reason: R): boolean {
    return this.current.kind === 'degraded' && this.current.reason === reason;
  }

  /** Whether it is stopping or stopped. */
  get ending(): boolean {
    return this.current.kind === 'stopping' || this.current.kind === 'stopped';
  }

  onTransition(listener: Transition<R>): void {
    this.listeners.push(listener);
  }

  /** Started: serving, unless something degraded it meanwhile. */
  started(): void {
    if (this.current.kind === 'starting') this.go({ kind: 'serving' });
  }

  /** Something keeps it from serving fully. */
  degrade(reason: R, detail: string): void {
    const c = this.current;
    if (this.ending) return;
    if (c.kind === 'degraded' && (c.reason === reason || this.permanent.includes(c.reason))) return;
    this.go({ kind: 'degraded', reason, detail });
  }

  /** What degraded it is over: serving again (never for a permanent reason). */
  recovered(reason: R): void {
    if (this.is(reason) && !this.permanent.includes(reason)) this.go({ kind: 'serving' });
  }

  stopping(): void {
    if (!this.ending) this.go({ kind: 'stopping' });
  }

  stopped(): void {
    if (this.current.kind !== 'stopped') this.go({ kind: 'stopped' });
  }

  private go(next: LifecycleState<R>): void {
    const previous = this.current;
    this.current = next;
    for (const l of this.listeners) l(next, previous);
  }
}
