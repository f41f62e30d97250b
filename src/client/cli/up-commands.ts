/** `berth up` and `berth sim …`: a working Berth on this machine, and simulated hosts for it. */
import { constants } from 'node:fs';
import { access, readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { parse as parseYaml } from 'yaml';
import { ConfigError } from '../../errors.js';
import { createLogger } from '../../logging.js';
import { cyborgOptionsFromFlags } from '../../server/scheduler/cyborg/config.js';
import { type PlacementFlags, placementOptionsFromFlags } from '../../server/scheduler/placement/config.js';
import { placementResourceClass } from '../../server/scheduler/placement/names.js';
import type { PlacementStatus } from '../../server/scheduler/placement/port.js';
import { buildSimHost, demoHostDefinition, type SimHostDefinition } from '../../sim/host.js';
import type { SimFault } from '../../sim/nvme-cli/index.js';
import { withStateLock } from '../../sim/nvme-cli/state.js';
import { clientConfigPath, clientConfigWritable, writeClientConfig } from '../client-config.js';
import { startUp, type Up } from '../up/berth-up.js';
import { findPlacement, which } from '../up/lab-openstack.js';
import { UsageError } from '../usage-error.js';
import { dbLocation, withDbPath, withListenHint } from './listen-hint.js';

/** Whether `name` is an executable file in a directory of $PATH. */
const onPath = async (name: string): Promise<boolean> => (await which(name)) !== null;

/**
 * The line suggesting a generic gRPC client against the scheduler, only
 * with a tool this machine has: the checkout's buf (a dev dependency), buf
 * or grpcurl on $PATH. An installed package ships neither, so it suggests
 * none unless the user installed one.
 */
export async function grpcCurlHint(cli: string, endpoint: string): Promise<string | undefined> {
  const checkoutBuf = fileURLToPath(new URL('../../../node_modules/.bin/buf', import.meta.url));
  const exists = await access(checkoutBuf, constants.X_OK).then(
    () => true,
    () => false,
  );
  if (cli === 'bin/berth' && exists) {
    return `  node_modules/.bin/buf curl --protocol grpc --http2-prior-knowledge --list-methods http://${endpoint}`;
  }
  if (await onPath('buf'))
    return `  buf curl --protocol grpc --http2-prior-knowledge --list-methods http://${endpoint}`;
  if (await onPath('grpcurl')) return `  grpcurl -plaintext ${endpoint} list`;
  return undefined;
}

export function registerUpCommands(program: Command): void {
  program
    .command('up')
    .description('run a scheduler and agents on this machine (simulated hosts unless --sysfs-root is given)')
    .option('--listen <addr>', 'scheduler listen address', '127.0.0.1:7070')
    .option(
      '--state-dir <dir>',
      'where the database, journals, tokens and simulated hosts live (one berth up at a time)',
      '.berth',
    )
    .option('--metrics-listen <addr>', "serve the scheduler's Prometheus /metrics on host:port")
    .option('--sysfs-root <dir>', 'manage a real sysfs tree (e.g. /sys) instead of simulated hosts')
    .option('-c, --config <file>', 'agent configuration for --sysfs-root (device_spec, drivers)')
    .option(
      '--db <url>',
      "the scheduler's database: a postgres://user@host/db URL (default: a SQLite file in the state directory)",
    )
    .option(
      '--replicas <n>',
      'run n schedulers on the --db postgres:// database, as a replicated control plane (the agents list them all)',
      (v: string) => {
        if (!/^[1-9]$/.test(v)) {
          throw new ConfigError(`--replicas: ${JSON.stringify(v)} is not a number of schedulers from 1 to 9`);
        }
        return Number(v);
      },
    )
    .option(
      '--placement-url <url>',
      'also report the devices to OpenStack Placement there (noauth: a lab Placement; no Nova, so root providers are created)',
    )
    .option('--placement-config <file>', 'Placement settings in a YAML file (docs/operator-guide.md)')
    .option(
      '--openstack',
      "a lab OpenStack side: Debian's placement-api on SQLite (noauth2) with Berth's providers, and the Cyborg API (noauth); prints the openstack commands that reach them",
    )
    .option('--cyborg-listen <addr>', 'with --openstack: where the Cyborg API listens', '127.0.0.1:6666')
    .option(
      '--nova-url <url>',
      "with --openstack: Nova's compute endpoint for accelerator-request-bound events (none: no events are sent)",
    )
    .option(
      '--nova-token-file <file>',
      'with --nova-url: a file holding the token sent to Nova (default: noauth, as a lab Nova)',
    )
    .action(
      async (
        o: PlacementFlags & {
          replicas?: number;
          listen: string;
          stateDir: string;
          metricsListen?: string;
          db?: string;
          sysfsRoot?: string;
          config?: string;
          openstack?: boolean;
          cyborgListen: string;
          novaUrl?: string;
          novaTokenFile?: string;
        },
      ) => {
        if (!o.openstack && (o.novaUrl || o.novaTokenFile)) {
          throw new UsageError(`${o.novaUrl ? '--nova-url' : '--nova-token-file'} goes with --openstack`);
        }
        if (o.openstack && (o.placementUrl || o.placementConfig)) {
          throw new UsageError(
            `--openstack starts its own Placement: give no ${o.placementUrl ? '--placement-url' : '--placement-config'}`,
          );
        }
        // Checked before anything starts: what to install, when placement-api is not there.
        const openstack = o.openstack
          ? {
              placementBins: await findPlacement(),
              cyborg: (await cyborgOptionsFromFlags({
                cyborgListen: o.cyborgListen,
                cyborgAuth: 'noauth',
                novaUrl: o.novaUrl,
                ...(o.novaUrl ? { novaAuth: o.novaTokenFile ? 'token' : 'noauth' } : {}),
                novaTokenFile: o.novaTokenFile,
              }))!,
            }
          : undefined;
        let agentConfig: Record<string, unknown> | undefined;
        if (o.config) agentConfig = parseYaml(await readFile(o.config, 'utf8')) as Record<string, unknown>;
        const placement = await placementOptionsFromFlags({
          ...(o.placementConfig ? { placementConfig: o.placementConfig } : {}),
          ...(o.placementUrl
            ? { placementUrl: o.placementUrl, placementAuth: 'noauth', placementCreateRoots: true }
            : {}),
        });
        if (o.sysfsRoot && !agentConfig) {
          throw new ConfigError('--sysfs-root needs -c/--config with the device_spec entries to manage');
        }
        // Fail before anything starts (and before any token is made) when the client
        // configuration cannot be written: a service account's HOME, a read-only one.
        const unwritable = await clientConfigWritable();
        if (unwritable) throw new UsageError(unwritable);
        // Machine logs go to a file in the state directory; the terminal gets the friendly lines.
        const logFile = join(resolve(o.stateDir), 'berth-up.log');
        const logger = createLogger({ level: process.env.BERTH_LOG_LEVEL ?? 'info' }, logFile);
        let up: Up;
        try {
          up = await startUp({
            listen: o.listen,
            stateDir: o.stateDir,
            sysfsRoot: o.sysfsRoot,
            agentConfig,
            logger,
            ...(o.metricsListen ? { metricsListen: o.metricsListen } : {}),
            ...(o.db ? { db: dbLocation(o.db) } : {}),
            ...(o.replicas !== undefined ? { replicas: o.replicas } : {}),
            ...(placement ? { placement } : {}),
            ...(openstack ? { openstack } : {}),
          });
        } catch (err) {
          const flags: Record<string, string> = { [o.listen]: '--listen' };
          if (openstack) flags[o.cyborgListen] = '--cyborg-listen';
          if (o.metricsListen) flags[o.metricsListen] = '--metrics-listen';
          const listen = withListenHint(err, flags, 'another berth up');
          throw o.db ? withDbPath(listen, '--db', o.db, dbLocation(o.db)) : listen;
        }
        // Every replica's endpoint: the CLI's channel moves to the next when one stops answering.
        const endpoints = up.schedulers.map((x) => x.address).join(',');
        let configPath: string;
        try {
          configPath = await writeClientConfig({
            endpoint: endpoints,
            token: up.adminToken,
            state_dir: up.stateDir,
          });
        } catch (err) {
          // Nothing may keep running (or keep the state directory locked) after a failed start.
          await up.stop();
          throw err;
        }
        // How the user runs berth: bin/berth in a checkout (it says so), else the installed command.
        const cli = process.env.BERTH_CLI_NAME ?? 'berth';
        const curl = await grpcCurlHint(cli, up.endpoint);
        const lines = [
          `Berth is up.`,
          `  scheduler  ${up.endpoint}   (state: ${up.stateDir})`,
          ...up.schedulers
            .slice(1)
            .map((x, i) => `  scheduler  ${x.address}   (replica ${i + 2}, same database)`),
          ...up.agents.map(
            (a) => `  agent      ${a.address}   host ${a.config.host}, ${a.inventory.list().length} devices`,
          ),
          ...(up.metricsAddress ? [`  metrics    http://${up.metricsAddress}/metrics`] : []),
          ...(await placementLines(up.schedulers[0]?.placement?.status() ?? null, cli)),
          ...(up.openstack
            ? [
                `  cyborg     ${up.openstack.cyborgUrl}   (noauth: X-Auth-Token is user[:project]; ${o.novaUrl ? `events to Nova at ${o.novaUrl}` : 'no Nova (--nova-url): binds run, no event is sent'})`,
                `  placement log ${up.openstack.placementLog}`,
              ]
            : []),
          `  client configuration (endpoint, admin token) written to ${configPath}`,
          `  tokens     ${up.tokens.file} (${up.tokens.created ? 'new' : 'the same as last time'}; delete it to rotate them)`,
          `  logs       ${logFile}`,
          '',
          'Try, in another terminal:',
          `  ${cli} demo`.padEnd(39) + '# the whole lifecycle, narrated',
          `  ${cli} device list`.padEnd(39) + '# every device, its state and cleanup action',
          `  ${cli} host list`,
          ...(curl ? [curl] : []),
          ...(up.openstack ? ['', ...(await openstackLines(up, up.openstack))] : []),
          '',
          'Stop with Ctrl-C.',
        ];
        console.log(lines.join('\n'));
        const stop = () => void up.stop().then(() => process.exit(0));
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
      },
    );

  const sim = program.command('sim').description('simulated hosts: sysfs tree, /dev, nvme-cli simulator');
  sim
    .command('build')
    .description('build a simulated host and write its agent configuration')
    .requiredOption('--root <dir>', 'directory to build the host in (must not exist or be empty)')
    .option('--host <name>', 'host name', 'sim-host-1')
    .option(
      '--spec <file>',
      'host definition (YAML/JSON, the SimHostDefinition shape); default: the demo host',
    )
    .action(async (o: { root: string; host: string; spec?: string }) => {
      const def = o.spec
        ? (parseYaml(await readFile(o.spec, 'utf8')) as SimHostDefinition)
        : demoHostDefinition(o.host);
      const host = await buildSimHost(resolve(o.root), def);
      console.log(
        JSON.stringify(
          {
            host: def.host,
            config: host.configPath,
            sysfs_root: host.sysfsRoot,
            dev_root: host.devRoot,
            nvme_cli: host.nvmeCli,
          },
          null,
          2,
        ),
      );
    });
  sim
    .command('fault')
    .description("inject (or clear) a fault in a simulated controller's nvme-cli")
    .requiredOption('--root <dir>', 'the simulated host directory')
    .requiredOption('--controller <name>', 'controller, e.g. nvme3')
    .requiredOption('--command <cmd>', 'nvme-cli command, e.g. sanitize, write-zeroes, sanitize-log')
    .option('--mode <mode>', 'error | hang | sanitize-fails | noop')
    .option('--status <hex>', 'NVMe status for --mode error, e.g. 0x4002')
    .option('--clear', 'remove the fault')
    .action(
      async (o: {
        root: string;
        controller: string;
        command: string;
        mode?: string;
        status?: string;
        clear?: boolean;
      }) => {
        let fault: SimFault | null = null;
        if (!o.clear) {
          if (o.mode === 'error') {
            const status = Number.parseInt(o.status ?? '', 16);
            if (!Number.isInteger(status))
              throw new ConfigError(`--status: ${JSON.stringify(o.status)} is not a hex NVMe status`);
            fault = { mode: 'error', status };
          } else if (o.mode === 'hang' || o.mode === 'sanitize-fails' || o.mode === 'noop') {
            fault = { mode: o.mode };
          } else {
            throw new ConfigError(
              `--mode: expected error, hang, sanitize-fails or noop, got ${JSON.stringify(o.mode)}`,
            );
          }
        }
        await withStateLock(resolve(o.root, 'nvme-sim.json'), (state) => {
          const c = state.controllers.find((x) => x.name === o.controller);
          if (!c)
            throw new ConfigError(`--controller: no controller ${JSON.stringify(o.controller)} in ${o.root}`);
          const faults = { ...(c.faults ?? {}) };
          if (fault) faults[o.command] = fault;
          else delete faults[o.command];
          c.faults = faults;
          return { changed: true, result: undefined };
        });
        console.log(
          fault
            ? `fault set: ${o.controller} ${o.command} ${JSON.stringify(fault)}`
            : `fault cleared: ${o.controller} ${o.command}`,
        );
      },
    );
}

export { clientConfigPath };

/**
 * The banner's Placement lines: where Berth reports, and whether it answers now
 * (its root document, no credentials needed); when not, that Berth goes on and
 * reports once it does. None when Berth does not report to a Placement.
 */
async function placementLines(st: PlacementStatus | null, cli: string): Promise<string[]> {
  if (!st) return [];
  const line = `  placement  ${st.url}   (${st.mode}, ${st.credentials})`;
  let why = '';
  try {
    const res = await fetch(st.url, { signal: AbortSignal.timeout(3_000) });
    if (res.status >= 500) why = `it answered ${res.status}`;
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code;
    why = cause ?? (err as Error).message;
  }
  if (!why) return [line];
  return [
    line,
    `             UNREACHABLE (${why}): Berth runs and reports once it answers; follow it with ${cli} placement status`,
  ];
}

/**
 * The `openstack` commands that reach the lab (docs/cyborg.md "Try it"): the
 * admin of noauth (Placement's noauth2 and the Cyborg API's noauth both take
 * the token as the user), each service at its own endpoint. The profile asks
 * for the resource class most of Berth's devices have in Placement.
 */
async function openstackLines(up: Up, lab: NonNullable<Up['openstack']>): Promise<string[]> {
  const { devices } = await up.scheduler.useCases.listDevices({}, { pageSize: 1000 });
  const count = new Map<string, number>();
  for (const d of devices) {
    const rc = placementResourceClass(d);
    count.set(rc, (count.get(rc) ?? 0) + 1);
  }
  const rc = [...count.entries()].sort((a, b) => b[1] - a[1])[0]?.[0] ?? 'CUSTOM_PCI_144D_A824';
  const host = devices[0]?.host ?? 'sim-host-1';
  const placement = `openstack --os-endpoint ${lab.placementUrl} --os-placement-api-version 1.39`;
  const cyborg = `openstack --os-endpoint ${lab.cyborgUrl} accelerator`;
  return [
    "OpenStack, in another terminal (Debian's openstack CLI; noauth: the token is the user, admin is an admin):",
    '  export OS_AUTH_TYPE=admin_token OS_TOKEN=admin',
    `  ${placement} resource provider list`,
    `  ${cyborg} device profile create lab '[{"resources:${rc}": "1"}]'`,
    `  ${cyborg} arq create lab`,
    `  ${cyborg} arq list`,
    `  ${cyborg} arq bind ARQ_UUID ${host} "$(cat /proc/sys/kernel/random/uuid)" PROVIDER_UUID   # a provider of ${host}`,
  ];
}
