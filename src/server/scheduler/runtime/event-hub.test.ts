/**
 * The hub's waits: woken by a notify after the version they saw, by their
 * stream's abort signal, or at once when already past; a stream's many waits
 * share one abort listener.
 */
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { EventHub } from './event-hub.js';

describe('EventHub', () => {
  it('a wait ends at the next notify, or at once when the version already moved past what it saw', async () => {
    const hub = new EventHub();
    const seen = hub.version;
    let woke = false;
    const w = hub.wait(undefined, seen).then(() => {
      woke = true;
    });
    await Promise.resolve();
    expect(woke).toBe(false);
    hub.notify();
    await w;
    expect(woke).toBe(true);
    // A change between reading the version and waiting is not slept through.
    await hub.wait(undefined, seen);
  });

  it("a stream's abort ends its pending wait; its thousand waits added one abort listener", async () => {
    const hub = new EventHub();
    const controller = new AbortController();
    for (let i = 0; i < 1000; i++) {
      const w = hub.wait(controller.signal, hub.version);
      hub.notify();
      await w;
    }
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    let woke = false;
    const pending = hub.wait(controller.signal, hub.version).then(() => {
      woke = true;
    });
    await Promise.resolve();
    expect(woke).toBe(false);
    controller.abort();
    await pending;
    expect(woke).toBe(true);
    // After the abort, waits return at once.
    await hub.wait(controller.signal, hub.version);
  });

  it('an abort ends only the waits of its own stream', async () => {
    const hub = new EventHub();
    const a = new AbortController();
    const b = new AbortController();
    let bWoke = false;
    const wa = hub.wait(a.signal, hub.version);
    const wb = hub.wait(b.signal, hub.version).then(() => {
      bWoke = true;
    });
    a.abort();
    await wa;
    await Promise.resolve();
    expect(bWoke).toBe(false);
    hub.close();
    await wb;
    expect(bWoke).toBe(true);
  });
});
