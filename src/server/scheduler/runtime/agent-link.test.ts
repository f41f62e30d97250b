/** The inventory stream taken a batch at a time, and cut into units (a burst of VFs is one unit). */
import { PassThrough, Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { WatchInventoryResponse } from '../../../gen/berth/agent/v1/agent.js';
import type { Device } from '../../../gen/berth/agent/v1/device.js';
import { inBatches, inventoryUnits } from './agent-link.js';

const dev = (address: string) => ({ address }) as Device;
const added = (revision: number, address: string): WatchInventoryResponse => ({
  epoch: 'e',
  revision,
  event: { $case: 'added', value: dev(address) },
});
const removed = (revision: number, address: string): WatchInventoryResponse => ({
  epoch: 'e',
  revision,
  event: { $case: 'removed', value: { address } },
});
const snapshot = (revision: number): WatchInventoryResponse => ({
  epoch: 'e',
  revision,
  event: { $case: 'snapshot', value: { devices: [] } },
});
const revisions = (units: WatchInventoryResponse[][]) => units.map((u) => u.map((m) => m.revision));

describe('inventoryUnits', () => {
  it('puts changes of distinct addresses in one unit', () => {
    const burst = Array.from({ length: 256 }, (_, i) =>
      added(i + 1, `0000:3b:${(i >> 3).toString(16).padStart(2, '0')}.${i & 7}`),
    );
    expect(inventoryUnits(burst)).toHaveLength(1);
  });

  it('starts a new unit where an address comes again, and gives a snapshot a unit of its own', () => {
    const a = '0000:01:00.0';
    const b = '0000:02:00.0';
    const units = inventoryUnits([
      added(1, a),
      added(2, b),
      removed(3, a),
      snapshot(4),
      added(5, a),
      removed(6, b),
    ]);
    expect(revisions(units)).toEqual([[1, 2], [3], [4], [5, 6]]);
  });
});

describe('inBatches', () => {
  it('yields what is buffered behind the first message, at most max, and every message once', async () => {
    const stream = new PassThrough({ objectMode: true, highWaterMark: 64 });
    for (let i = 0; i < 10; i++) stream.write(i);
    stream.end();
    const batches: number[][] = [];
    for await (const b of inBatches<number>(stream, 4)) batches.push(b);
    expect(batches.flat()).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(batches.every((b) => b.length <= 4)).toBe(true);
    expect(batches.length).toBeLessThan(10);
  });

  it("reads past the stream's high-water mark while more keeps coming, as gRPC's client streams deliver", async () => {
    // gRPC asks the transport for one message per _read and pushes it a few
    // microtasks later, so at most 16 are ever buffered (decision 87).
    let next = 0;
    const stream = new Readable({
      objectMode: true,
      highWaterMark: 16,
      read() {
        const n = next++;
        void Promise.resolve().then(() => this.push(n < 1000 ? n : null));
      },
    });
    const batches: number[][] = [];
    for await (const b of inBatches<number>(stream, 600)) batches.push(b);
    expect(batches.flat()).toEqual(Array.from({ length: 1000 }, (_, i) => i));
    expect(batches.map((b) => b.length)).toEqual([600, 400]);
  });

  it('ends a batch maxWaitMs after its first message, however busy the stream (decision 97)', async () => {
    // A stream that never goes quiet: one message every turn of the event loop, until told to stop.
    let next = 0;
    let stop = false;
    const stream = new Readable({
      objectMode: true,
      read() {
        setImmediate(() => this.push(stop ? null : next++));
      },
    });
    const it = inBatches<number>(stream, 1_000_000, 20);
    const first = await it.next();
    // Before the change the batch grew until the stream went quiet or reached max: it never came.
    expect(first.done).toBe(false);
    expect(first.value!.length).toBeGreaterThan(0);
    stop = true;
    const rest: number[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(...r.value);
    expect([...first.value!, ...rest]).toEqual(Array.from({ length: next }, (_, i) => i));
  });

  it('yields what arrived before a failure, then throws it', async () => {
    const stream = new PassThrough({ objectMode: true });
    const it = inBatches<string>(stream, 8, 10);
    stream.write('a');
    stream.write('b');
    expect((await it.next()).value).toEqual(['a', 'b']);
    stream.write('c');
    stream.destroy(new Error('the agent went away'));
    expect((await it.next()).value).toEqual(['c']);
    await expect(it.next()).rejects.toThrow('the agent went away');
  });

  it('a consumer that stops early ends the stream and leaves no listener on it', async () => {
    const stream = new PassThrough({ objectMode: true });
    stream.write(1);
    for await (const b of inBatches<number>(stream, 8, 10)) {
      expect(b).toEqual([1]);
      break;
    }
    expect(stream.destroyed).toBe(true);
    expect(stream.listenerCount('data')).toBe(0);
  });

  it('waits for a message that is not there yet', async () => {
    const stream = new PassThrough({ objectMode: true });
    const it = inBatches<string>(stream, 8);
    const first = it.next();
    stream.write('late');
    expect((await first).value).toEqual(['late']);
    stream.end();
    expect((await it.next()).done).toBe(true);
  });
});
