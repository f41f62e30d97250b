import { describe, expect, it } from 'vitest';
import { Teardown } from './teardown.js';

describe('Teardown', () => {
  it('closes last-registered first, each once, sync and async alike', async () => {
    const t = new Teardown();
    const closed: string[] = [];
    t.defer('a', () => closed.push('a'));
    t.defer('b', async () => {
      await Promise.resolve();
      closed.push('b');
    });
    t.defer('c', () => closed.push('c'));
    await t.run();
    await t.run();
    expect(closed).toEqual(['c', 'b', 'a']);
  });

  it('closes the rest when one closer throws, then throws that error naming what it closed', async () => {
    const t = new Teardown();
    const closed: string[] = [];
    t.defer('the store', () => closed.push('store'));
    t.defer('the server', () => {
      throw new Error('port stuck');
    });
    t.defer('the cyborg API', () => closed.push('cyborg'));
    await expect(t.run()).rejects.toThrow('closing the server: port stuck');
    expect(closed).toEqual(['cyborg', 'store']);
  });

  it('on a failed step closes what was registered before it and throws the step error', async () => {
    const t = new Teardown();
    const closed: string[] = [];
    t.defer('lock', () => closed.push('lock'));
    t.defer('store', () => {
      throw new Error('store close failed');
    });
    const failure = new Error('listen EADDRINUSE');
    await expect(t.guard(() => Promise.reject(failure))).rejects.toBe(failure);
    expect(closed).toEqual(['lock']);
    expect((failure as Error & { suppressed?: Error }).suppressed?.message).toBe(
      'closing store: store close failed',
    );
    // A step that succeeds closes nothing.
    t.defer('later', () => closed.push('later'));
    expect(await t.guard(async () => 42)).toBe(42);
    expect(closed).toEqual(['lock']);
  });
});
