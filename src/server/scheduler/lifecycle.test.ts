import { describe, expect, it } from 'vitest';
import { SchedulerLifecycle, type SchedulerState } from './lifecycle.js';

describe("the scheduler's lifecycle", () => {
  const track = () => {
    const l = new SchedulerLifecycle();
    const seen: SchedulerState[] = [];
    l.onTransition((next) => seen.push(next));
    return { l, seen };
  };

  it('starting → serving ⇄ degraded(database_unreachable) → stopping → stopped, each transition once', () => {
    const { l, seen } = track();
    expect(l.state).toEqual({ kind: 'starting' });
    l.started();
    l.degrade('database_unreachable', 'connection refused');
    l.degrade('database_unreachable', 'still refused'); // no second transition
    l.recovered('database_unreachable');
    l.started(); // only from starting
    l.stopping();
    l.degrade('database_unreachable', 'late'); // a stopping scheduler is not degraded any more
    l.stopped();
    expect(seen).toEqual([
      { kind: 'serving' },
      { kind: 'degraded', reason: 'database_unreachable', detail: 'connection refused' },
      { kind: 'serving' },
      { kind: 'stopping' },
      { kind: 'stopped' },
    ]);
  });

  it('a damaged store outranks an unreachable database and does not heal; found at start, it is never serving', () => {
    const { l, seen } = track();
    l.degrade('store_damaged', 'malformed page');
    l.started();
    l.degrade('database_unreachable', 'timeout');
    l.recovered('database_unreachable');
    expect(l.damaged).toBe(true);
    expect(seen).toEqual([{ kind: 'degraded', reason: 'store_damaged', detail: 'malformed page' }]);

    const u = track();
    u.l.started();
    u.l.degrade('database_unreachable', 'timeout');
    u.l.degrade('store_damaged', 'malformed page');
    u.l.recovered('database_unreachable');
    expect(u.l.state).toMatchObject({ kind: 'degraded', reason: 'store_damaged' });
  });
});
