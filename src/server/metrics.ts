/**
 * Prometheus metrics (prom-client) for the scheduler and the agent: RPC latency
 * and outcomes by method and code (one server interceptor), cleanups by action
 * and outcome with a duration histogram, and devices by state, host and type
 * (read from the source of truth at scrape time, so a gauge never drifts).
 * Each server process has its own registry and endpoint (`berth up` serves the
 * scheduler's).
 */
import { createServer, type Server } from 'node:http';
import { ServerInterceptingCall, type ServerInterceptor, status } from '@grpc/grpc-js';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { listenError, parseListenAddress } from './listen-address.js';

const CODE_NAMES = new Map<number, string>(
  Object.entries(status)
    .filter(([, v]) => typeof v === 'number')
    .map(([k, v]) => [v as number, k]),
);

const STORE_DAMAGED_HELP =
  "1 when the scheduler's database is damaged and it serves nothing (the reason is a label); 0 while it is not";
const COMMITS_LOST_HELP =
  '1 when the scheduler started after an unclean stop with its write-ahead log missing: recent commits are lost; 0 otherwise';

/**
 * Devices of one type, state and resource class. Not by host: 50,000 hosts
 * would make 50,000 series (decision 70); a host's devices are one
 * ListDevices call away.
 */
export interface DeviceCount {
  type: string;
  state: string;
  resourceClass: string;
  count: number;
}

export class Metrics {
  readonly registry = new Registry();
  readonly rpcDuration: Histogram<'method' | 'code'>;
  readonly cleanups: Counter<'action' | 'outcome'>;
  readonly cleanupDuration: Histogram<'action' | 'outcome'>;

  constructor(readonly component: 'scheduler' | 'agent') {
    this.registry.setDefaultLabels({ component });
    this.rpcDuration = new Histogram({
      name: 'berth_rpc_duration_seconds',
      help: 'gRPC calls served, by method and status code (streams: until they end)',
      labelNames: ['method', 'code'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30],
      registers: [this.registry],
    });
    this.cleanups = new Counter({
      name: 'berth_cleanups_total',
      help: 'Cleanups that ended, by locked-in action and outcome',
      labelNames: ['action', 'outcome'],
      registers: [this.registry],
    });
    this.cleanupDuration = new Histogram({
      name: 'berth_cleanup_duration_seconds',
      help: 'Duration of cleanups that ended, by action and outcome',
      labelNames: ['action', 'outcome'],
      buckets: [1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600],
      registers: [this.registry],
    });
    if (component === 'scheduler') {
      // Alarms exist at 0 from the start: an alert rule and a dashboard see the
      // series while all is well, and `absent()` means a scrape problem, not health.
      this.alarmGauge('berth_store_damaged', STORE_DAMAGED_HELP, 'why');
      this.alarmGauge('berth_store_commits_lost', COMMITS_LOST_HELP, 'wal');
    }
  }

  /** A gauge of devices by type, state and resource class, computed by `read` at every scrape. */
  devicesGauge(read: () => Promise<DeviceCount[]> | DeviceCount[]): void {
    new Gauge({
      name: 'berth_devices',
      help: 'Devices by type, state and resource class',
      labelNames: ['type', 'state', 'resource_class'],
      registers: [this.registry],
      async collect() {
        this.reset();
        // A store that cannot answer (damaged, closing) leaves the gauge empty, not the scrape broken.
        const counts = await Promise.resolve()
          .then(read)
          .catch(() => [] as DeviceCount[]);
        // Label values are spelt as everywhere else outside the proto: lower case (nvme, pending_cleaning).
        for (const c of counts) {
          this.set(
            { type: c.type.toLowerCase(), state: c.state.toLowerCase(), resource_class: c.resourceClass },
            c.count,
          );
        }
      },
    });
  }

  /**
   * The agent's hotplug: whether kernel events are followed now, how many came,
   * and the discovery passes by kind (read from the agent at every scrape).
   */
  hotplug(
    read: () => {
      up: boolean;
      events: number;
      partialPasses: number;
      fullPasses: number;
      functionsReread: number;
    },
  ): void {
    const registers = [this.registry];
    new Gauge({
      name: 'berth_agent_hotplug_following',
      help: "1 while the agent follows the kernel's uevents, 0 while it polls (no source, or the source failed)",
      registers,
      collect() {
        this.set(read().up ? 1 : 0);
      },
    });
    new Counter({
      name: 'berth_agent_hotplug_events_total',
      help: 'Kernel uevents the agent received',
      registers,
      collect() {
        this.reset();
        this.inc(read().events);
      },
    });
    new Counter({
      name: 'berth_agent_discovery_passes_total',
      help: 'Discovery passes, by kind: full (every function) or partial (the functions events named)',
      labelNames: ['kind'],
      registers,
      collect() {
        const r = read();
        this.reset();
        this.inc({ kind: 'full' }, r.fullPasses);
        this.inc({ kind: 'partial' }, r.partialPasses);
      },
    });
    new Counter({
      name: 'berth_agent_hotplug_functions_reread_total',
      help: 'Functions re-read by partial discovery passes',
      registers,
      collect() {
        this.reset();
        this.inc(read().functionsReread);
      },
    });
  }

  /** berth_store_damaged: 1 (with the reason) once the scheduler's database is found damaged. */
  storeDamaged(why: string): void {
    this.alarm('berth_store_damaged', STORE_DAMAGED_HELP, 'why', why.slice(0, 200));
  }

  /** berth_store_commits_lost: 1 when the scheduler started on a database whose write-ahead log was lost. */
  storeCommitsLost(wal: string): void {
    this.alarm('berth_store_commits_lost', COMMITS_LOST_HELP, 'wal', wal);
  }

  private reachable: Gauge | null = null;

  /** Whether the last look at a shared database (PostgreSQL) reached it: 1 or 0. */
  storeReachable(ok: boolean): void {
    this.reachable ??= new Gauge({
      name: 'berth_store_reachable',
      help: "1 while the scheduler's shared database answers (its link-lease look every 2 s), 0 while it does not",
      registers: [this.registry],
    });
    this.reachable.set(ok ? 1 : 0);
  }

  private readonly alarms = new Map<string, Gauge>();

  /** An alarm's gauge: 0 without a label while nothing is wrong. */
  private alarmGauge(name: string, help: string, label: string): Gauge {
    let g = this.alarms.get(name);
    if (!g) {
      g = new Gauge({ name, help, labelNames: [label], registers: [this.registry] });
      g.set(0);
      this.alarms.set(name, g);
    }
    return g;
  }

  /** Raises an alarm: 1, with one label saying why, in place of its 0. */
  private alarm(name: string, help: string, label: string, value: string): void {
    const g = this.alarmGauge(name, help, label);
    g.reset();
    g.set({ [label]: value }, 1);
  }

  private refused: Counter<'host' | 'reason'> | null = null;

  /** berth_inventory_refused_total: an agent's inventory update (or one device of it) refused at a bound. */
  inventoryRefused(host: string, reason: string, count = 1): void {
    this.refused ??= new Counter({
      name: 'berth_inventory_refused_total',
      help: 'Inventory updates or devices refused because a host went beyond a bound (domain/inventory-bounds.ts), by host and reason',
      labelNames: ['host', 'reason'],
      registers: [this.registry],
    });
    this.refused.inc({ host, reason }, count);
  }

  private mediaRefused: Counter<'host' | 'reason'> | null = null;

  /**
   * berth_media_records_refused_total: media records of a registration the
   * scheduler refused (domain/media-reports.ts), by host and reason.
   */
  mediaRecordsRefused(host: string, reason: string, count: number): void {
    this.mediaRefused ??= new Counter({
      name: 'berth_media_records_refused_total',
      help: "Media records of agents' registrations the scheduler refused: another host's media, a forgotten one, or past a bound (docs/media-identity.md), by host and reason",
      labelNames: ['host', 'reason'],
      registers: [this.registry],
    });
    this.mediaRefused.inc({ host, reason }, count);
  }

  observeCleanup(action: string, outcome: string, seconds: number): void {
    this.cleanups.inc({ action, outcome });
    this.cleanupDuration.observe({ action, outcome }, seconds);
  }

  /** Times every call and labels it with the status code it ended with. */
  interceptor(): ServerInterceptor {
    const hist = this.rpcDuration;
    return (methodDescriptor, call) => {
      const method = methodDescriptor.path.replace(/^\//, '');
      const start = process.hrtime.bigint();
      return new ServerInterceptingCall(call, {
        sendStatus(st, next) {
          const seconds = Number(process.hrtime.bigint() - start) / 1e9;
          hist.observe({ method, code: CODE_NAMES.get(st.code) ?? String(st.code) }, seconds);
          next(st);
        },
      });
    };
  }
}

/** Serves /metrics of a registry on `listen` (host:port; port 0 = any). */
export async function serveMetrics(
  listen: string,
  registry: Registry,
): Promise<{ server: Server; address: string }> {
  const server = createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(404).end('not found: try /metrics\n');
      return;
    }
    registry.metrics().then(
      (body) => res.writeHead(200, { 'content-type': registry.contentType }).end(body),
      (err: Error) => res.writeHead(500).end(`metrics failed: ${err.message}\n`),
    );
  });
  const { host, port: wanted } = parseListenAddress(listen);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(listenError(listen, err)));
    server.listen(wanted, host, () => resolve());
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return { server, address: `${host}:${port}` };
}
