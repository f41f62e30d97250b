import { describe, expect, it } from 'vitest';
import { Lifecycle, type LifecycleState } from './lifecycle.js';

type Reason = 'store_damaged' | 'database_unreachable';

describe('a server lifecycle', () => {
  const track = () => {
    const l = new Lifecycle<Reason>(['store_damaged']);
    const seen: LifecycleState<Reason>[] = [];
    l.onTransition((next) => seen.push(next));
    return { l, seen };
  };

  it('starting → serving ⇄ degraded(reason) → stopping → stopped, each transition once', () => {
    const { l, seen } = track();
    expect(l.state).toEqual({ kind: 'starting' });
    l.started();
    l.degrade('database_unreachable', 'connection refused');
    l.degrade('database_unreachable', 'still refused'); // no second transition
    l.recovered('database_unreachable');
    l.started(); // only from starting
    l.stopping();
    l.degrade('database_unreachable', 'late'); // a stopping server is not degraded any more
    l.stopped();
    expect(seen).toEqual([
      { kind: 'serving' },
      { kind: 'degraded', reason: 'database_unreachable', detail: 'connection refused' },
      { kind: 'serving' },
      { kind: 'stopping' },
      { kind: 'stopped' },
    ]);
  });

  it('a permanent reason outranks the others and does not heal; found at start, it is never serving', () => {
    const { l, seen } = track();
    l.degrade('store_damaged', 'malformed page');
    l.started();
    l.degrade('database_unreachable', 'timeout');
    l.recovered('database_unreachable');
    l.recovered('store_damaged');
    expect(l.is('store_damaged')).toBe(true);
    expect(seen).toEqual([{ kind: 'degraded', reason: 'store_damaged', detail: 'malformed page' }]);

    const u = track();
    u.l.started();
    u.l.degrade('database_unreachable', 'timeout');
    u.l.degrade('store_damaged', 'malformed page');
    u.l.recovered('database_unreachable');
    expect(u.l.state).toMatchObject({ kind: 'degraded', reason: 'store_damaged' });
  });
});
