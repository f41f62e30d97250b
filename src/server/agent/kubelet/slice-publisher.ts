/**
 * Publishes this host's ResourceSlices (./resource-slices.ts) on the
 * Kubernetes API server through @kubernetes/client-node (issue 39,
 * decision 76).
 *
 * - A sync lists the slices of this driver and node (field selector
 *   `spec.driver`, `spec.nodeName`) in this host's pool, builds what the
 *   pool should be now, and when the devices differ writes the pool at the
 *   next generation: each slice replaced (with the resourceVersion read) or
 *   created, then the slices left over deleted. When nothing differs it
 *   writes nothing.
 * - A sync runs at start, at every change of the inventory (a device seen,
 *   gone, held, dirty, cleaned: the journal's changes are inventory events)
 *   and every resync interval. A device comes back into its slice only
 *   after the journal records it clean: after the scrub's proof was accepted.
 * - A failure (the API server down, a 409 from a writer racing this one, a
 *   refusal) is logged and retried, the interval doubling from retry_interval
 *   up to resync_interval; the next sync lists afresh, so it catches up with
 *   whatever changed meanwhile. The agent never waits on it.
 */
import {
  type ConfigurationOptions,
  Observable,
  type ObservableMiddleware,
  type ResourceV1Api,
  type V1ResourceSlice,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Inventory } from '../inventory.js';
import { buildSlices, publishedDevices, type ResourceSlice, type SliceDevice } from './resource-slices.js';
import type { ResourceSlicesConfig } from './slices-config.js';

/** What the publisher calls on the API server (a ResourceV1Api). */
export type SliceApi = Pick<
  ResourceV1Api,
  'listResourceSlice' | 'createResourceSlice' | 'replaceResourceSlice' | 'deleteResourceSlice'
>;

export interface SlicePublisherOptions {
  config: ResourceSlicesConfig;
  /** Milliseconds an API server call may take before it is aborted (default 10 s): a server that never answers is a failure like any other. */
  requestTimeoutMs?: number;
  api: SliceApi;
  inventory: Inventory;
  isCleaning(mediaKey: string): boolean;
  logger: Logger;
}

/** Call options aborting a request after `ms` (client-node's object API takes observable middleware). */
function timeout(ms: number): ConfigurationOptions {
  const abort: ObservableMiddleware = {
    pre: (context) => {
      context.setSignal(AbortSignal.timeout(ms));
      return new Observable(Promise.resolve(context));
    },
    post: (context) => new Observable(Promise.resolve(context)),
  };
  return { middleware: [abort], middlewareMergeStrategy: 'append' };
}

/** The HTTP status of a client-node failure (ApiException.code), or null (no answer: connection refused, reset). */
function statusOf(err: unknown): number | null {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' ? code : null;
}

/** A short account of a failure: the Status message of the API server's answer, or the transport's error. */
function describe(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  if (typeof body === 'string') {
    try {
      const status = JSON.parse(body) as { message?: string; reason?: string };
      if (status.message) return `${statusOf(err)} ${status.reason ?? ''}: ${status.message}`;
    } catch {
      // not a Status: the message below
    }
  }
  return (err as Error).message ?? String(err);
}

/** Keys sorted: equal content, equal text. */
const canonical = (v: unknown): string =>
  JSON.stringify(v, (_k, x) =>
    x && typeof x === 'object' && !Array.isArray(x)
      ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)))
      : x,
  );

/**
 * client-node's model names an attribute's `int` `_int` (its serializer maps
 * it to and from the wire's `int`): Berth's slices are turned into its model
 * before they are sent, and read back from it.
 */
function toModel(slice: ResourceSlice, resourceVersion?: string): V1ResourceSlice {
  return {
    ...slice,
    metadata: { ...slice.metadata, ...(resourceVersion !== undefined ? { resourceVersion } : {}) },
    spec: {
      ...slice.spec,
      devices: slice.spec.devices.map((d) => ({
        name: d.name,
        attributes: Object.fromEntries(
          Object.entries(d.attributes).map(([k, v]) => [k, 'int' in v ? { _int: v.int } : v]),
        ),
      })),
    },
  };
}

/** The devices of a stored slice, as Berth builds them (name and attributes, `int` for the model's `_int`). */
const devicesOf = (s: V1ResourceSlice): SliceDevice[] =>
  (s.spec.devices ?? []).map((d) => ({
    name: d.name,
    attributes: Object.fromEntries(
      Object.entries(d.attributes ?? {}).map(([k, v]) => {
        const value: Record<string, unknown> = {};
        for (const [field, x] of Object.entries(v))
          if (x !== undefined) value[field === '_int' ? 'int' : field] = x;
        return [k, value as SliceDevice['attributes'][string]];
      }),
    ),
  }));

export class ResourceSlicePublisher {
  private timer: NodeJS.Timeout | null = null;
  private unsubscribe: (() => void) | null = null;
  private running: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  /** Failures in a row (0 after a sync that worked). */
  private failures = 0;
  /** Syncs that completed (tests wait on it). */
  syncs = 0;
  /** The pool's generation as last written or seen; 0 before the first sync. */
  generation = 0;
  private readonly logger: Logger;
  /** Every call's options: aborted after requestTimeoutMs. */
  private readonly call: ConfigurationOptions;

  constructor(private readonly options: SlicePublisherOptions) {
    this.logger = options.logger.child({ component: 'resource-slices' });
    this.call = timeout(options.requestTimeoutMs ?? 10_000);
  }

  start(): void {
    this.unsubscribe = this.options.inventory.subscribe(() => this.kick());
    this.kick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.unsubscribe?.();
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }

  /** Runs a sync now (or right after the one running). */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.running = this.run().finally(() => {
      this.running = null;
      if (this.again) {
        this.again = false;
        this.kick();
      }
    });
  }

  private async run(): Promise<void> {
    let delay = this.options.config.resyncMs;
    try {
      await this.sync();
      if (this.failures > 0) {
        this.logger.info(
          { failures: this.failures, generation: this.generation },
          'ResourceSlices caught up',
        );
      }
      this.failures = 0;
      this.syncs++;
    } catch (err) {
      this.failures++;
      delay = Math.min(this.options.config.retryMs * 2 ** (this.failures - 1), this.options.config.resyncMs);
      this.logger.warn(
        { status: statusOf(err), failures: this.failures, retryInMs: delay, error: describe(err) },
        'publishing ResourceSlices failed; retrying',
      );
    }
    if (this.stopped || this.again) return;
    this.timer = setTimeout(() => this.kick(), delay);
    this.timer.unref();
  }

  /** Brings the pool on the API server to this host's devices now. */
  private async sync(): Promise<void> {
    const { api, config } = this.options;
    const { devices, withheld } = publishedDevices(this.options.inventory.list(), (k) =>
      this.options.isCleaning(k),
    );
    const listed = await api.listResourceSlice(
      { fieldSelector: `spec.driver=${config.driver},spec.nodeName=${config.nodeName}` },
      this.call,
    );
    const mine = listed.items.filter((s) => s.spec.pool.name === config.pool);
    const current = Math.max(0, ...mine.map((s) => s.spec.pool.generation));
    const wanted = buildSlices(config, devices, Math.max(current, 1));
    if (this.matches(mine, wanted)) {
      this.generation = current;
      return;
    }
    const next = buildSlices(config, devices, current + 1);
    const byName = new Map(mine.map((s) => [s.metadata?.name ?? '', s]));
    for (const slice of next) {
      const old = byName.get(slice.metadata.name);
      byName.delete(slice.metadata.name);
      await this.write(slice, old);
    }
    for (const name of byName.keys()) {
      try {
        await api.deleteResourceSlice({ name }, this.call);
      } catch (err) {
        if (statusOf(err) !== 404) throw err;
      }
    }
    this.generation = current + 1;
    this.logger.info(
      {
        generation: this.generation,
        slices: next.length,
        devices: devices.map((d) => d.name),
        withheld,
      },
      'ResourceSlices published',
    );
  }

  /** Whether the stored slices are exactly the pool wanted: same names, one generation, same count and devices. */
  private matches(mine: readonly V1ResourceSlice[], wanted: readonly ResourceSlice[]): boolean {
    if (mine.length !== wanted.length) return false;
    if (new Set(mine.map((s) => s.spec.pool.generation)).size > 1) return false;
    const byName = new Map(mine.map((s) => [s.metadata?.name ?? '', s]));
    return wanted.every((w) => {
      const s = byName.get(w.metadata.name);
      return (
        s !== undefined &&
        s.spec.pool.resourceSliceCount === w.spec.pool.resourceSliceCount &&
        canonical(devicesOf(s)) === canonical(w.spec.devices)
      );
    });
  }

  /** Replaces `old` (at the resourceVersion read) with `slice`, or creates it. */
  private async write(slice: ResourceSlice, old: V1ResourceSlice | undefined): Promise<void> {
    const { api } = this.options;
    if (!old) {
      await api.createResourceSlice({ body: toModel(slice) }, this.call);
      return;
    }
    const body = toModel(slice, old.metadata?.resourceVersion ?? '');
    await api.replaceResourceSlice({ name: slice.metadata.name, body }, this.call);
  }
}
