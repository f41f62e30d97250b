/** `berth agent serve` and `berth agent discover` (the operator's dry run). */
import type { Command } from 'commander';
import { ConfigError } from '../../errors.js';
import { createLogger } from '../../logging.js';
import type { DiscoveredDevice } from '../../plugins/types.js';
import { Agent } from '../../server/agent/agent.js';
import { CleanupJournal } from '../../server/agent/cleanup-journal.js';
import {
  type AgentConfig,
  agentAuthOptions,
  type ConfigOverrides,
  loadAgentConfig,
} from '../../server/agent/config.js';
import type { StoredMedia } from '../../server/agent/media-ledger.js';
import { PluginHost } from '../../server/agent/plugin-host.js';
import { Authenticator } from '../../server/grpc/auth/authenticator.js';
import { readCertRolesFile } from '../../server/grpc/auth/configuration.js';
import { loadTls, serverCredentials } from '../../server/grpc/tls.js';
import { withListenHint } from './listen-hint.js';
import { parseFormat, render, renderTable } from './output.js';

interface AgentFlags {
  config?: string;
  sysfsRoot?: string;
  devRoot?: string;
  procRoot?: string;
  nvmeCli?: string;
  stateDir?: string;
  listen?: string;
  scheduler?: string;
  host?: string;
  insecureNoAuth?: boolean;
  certRoles?: string;
  output: string;
}

async function overrides(o: AgentFlags): Promise<ConfigOverrides> {
  return {
    ...(o.certRoles ? { certRoles: await readCertRolesFile(o.certRoles) } : {}),
    sysfsRoot: o.sysfsRoot,
    devRoot: o.devRoot,
    procRoot: o.procRoot,
    nvmeCli: o.nvmeCli,
    stateDir: o.stateDir,
    listen: o.listen,
    scheduler: o.scheduler,
    host: o.host,
    insecureNoAuth: o.insecureNoAuth,
  };
}

/**
 * A discovered device as the dry run prints it: snake_case keys like the
 * config, enum values in lower case as everywhere outside the proto (`nvme`,
 * `vf`, `healthy`).
 */
export function deviceSummary(d: DiscoveredDevice, records?: Map<string, StoredMedia> | null) {
  const record = d.media ? records?.get(d.media.key) : undefined;
  return {
    address: d.address,
    driver: d.driver,
    type: d.type.toLowerCase(),
    function_kind: d.functionKind.toLowerCase(),
    vendor_id: d.vendorId,
    product_id: d.productId,
    class_code: d.classCode,
    kernel_driver: d.kernelDriver,
    physfn: d.physfn,
    iommu_group: d.iommuGroup,
    iommu_group_peers: d.iommuGroupPeers,
    numa_node: d.numaNode,
    resource_class: d.resourceClass,
    traits: d.traits,
    managed: d.managed,
    live_migratable: d.liveMigratable,
    one_time_use: d.oneTimeUse,
    supports_cleaning: d.supportsCleaning,
    cleanup_action: d.cleanupAction,
    health: d.health,
    health_reason: d.healthReason,
    unallocatable_reason: d.unallocatableReason,
    attributes: d.attributes,
    // What tenant data on it is followed by (docs/media-identity.md).
    media: d.media
      ? {
          key: d.media.key,
          kind: d.media.kind.toLowerCase(),
          subsystem_nqn: d.media.subsystemNqn,
          serial: d.media.serial,
          model: d.media.model,
          namespaces: d.media.namespaces,
          device_serial_number: d.media.deviceSerialNumber,
        }
      : null,
    // What the agent's journal (in --state-dir) says of that media; null when it has no record.
    media_record: record
      ? {
          condition: record.condition,
          burned: record.burned,
          since: new Date(record.since).toISOString(),
          last_address: record.lastAddress,
          ...(record.reason ? { reason: record.reason } : {}),
        }
      : null,
    ...(d.assumeClean ? { assume_clean: true } : {}),
  };
}

function withAgentFlags(cmd: Command): Command {
  return cmd
    .requiredOption('-c, --config <file>', 'agent configuration file (YAML or JSON)')
    .option('--sysfs-root <dir>', 'sysfs root (overrides sysfs_root)')
    .option('--dev-root <dir>', 'device node root (overrides dev_root)')
    .option('--proc-root <dir>', "procfs root: the host's mounts and routes (overrides proc_root)")
    .option('--nvme-cli <path>', 'nvme-cli executable (overrides nvme.nvme_cli)')
    .option('--state-dir <dir>', 'state directory (overrides state_dir)')
    .option('--host <name>', 'host name (overrides host)')
    .option(
      '--cert-roles <file>',
      'YAML lines "common-name: role": callers identified by client certificate alone (overrides auth.cert_roles; needs tls.ca)',
    )
    .option(
      '--insecure-no-auth',
      'serve without authentication (overrides auth; anyone who reaches the port may clean devices)',
    );
}

/**
 * Everything `agent serve` checks before it serves, besides discovery: the
 * authentication it would use (refused without one) and the TLS files. The
 * dry run runs it too, so it never passes a configuration serve refuses.
 */
async function checkServe(config: AgentConfig): Promise<void> {
  new Authenticator(await agentAuthOptions(config));
  if (config.tls) serverCredentials(await loadTls(config.tls));
}

export function registerAgentCommands(program: Command): void {
  const agent = program.command('agent').description('the host agent');

  agent
    .command('signing-key')
    .description(
      "print the agent's erasure certificate signing key (public JWK and key id), made if it has none; --rotate makes a new one (pin it with berth host rotate-key, then restart the agent)",
    )
    .requiredOption('--state-dir <dir>', "the agent's state directory")
    .option('--rotate', 'make a new key; the old file stays as signing-key.<kid>.pem')
    .action(async (o: { stateDir: string; rotate?: boolean }) => {
      const { loadOrCreateSigningKey, rotateSigningKey } = await import('../../server/agent/signing-key.js');
      const key = o.rotate ? rotateSigningKey(o.stateDir).key : loadOrCreateSigningKey(o.stateDir);
      console.log(JSON.stringify({ ...key.publicJwk, kid: key.kid }));
    });

  withAgentFlags(agent.command('discover'))
    .description(
      'dry run: print what the configuration manages on this host, and what it excludes and why. ' +
        'It checks the configuration file and discovery (device_spec, drivers, this host): exit 0 when they work, 2 when not. ' +
        'What only `agent serve` needs (auth, TLS files) is checked with --serve; without it a refusal is a note on stderr',
    )
    .option('-o, --output <format>', 'table, wide, json or yaml', 'table')
    .option('--serve', 'also check what agent serve needs (auth, TLS files): exit 2 when serve would refuse')
    .action(async (o: AgentFlags & { serve?: boolean }) => {
      const format = parseFormat(o.output);
      const config = await loadAgentConfig(o.config!, await overrides(o));
      // Everything the dry run learns is in its output (exclusions with their
      // reasons, failures as the error): the drivers' log lines would say it
      // twice. BERTH_LOG_LEVEL=info shows them.
      const logger = createLogger({ level: process.env.BERTH_LOG_LEVEL ?? 'silent' });
      const host = await PluginHost.loadFor(config, { readOnly: true, logger });
      await host.initHost();
      const result = await host.discover({ strict: true });
      const records = CleanupJournal.readMedia(config.stateDir);
      const data = {
        devices: result.devices.map((d) => deviceSummary(d, records)),
        excluded: result.excluded,
      };
      console.log(
        render(format, data, (wide) => {
          const devices =
            result.devices.length === 0
              ? 'No devices found: no device_spec entry matches a function of this host.'
              : renderTable(
                  data.devices,
                  [
                    { header: 'address', get: (d) => d.address, fixed: true },
                    { header: 'driver', get: (d) => d.driver },
                    { header: 'kind', get: (d) => d.function_kind },
                    { header: 'vendor:product', get: (d) => `${d.vendor_id}:${d.product_id}` },
                    { header: 'resource class', get: (d) => d.resource_class },
                    { header: 'managed', get: (d) => d.managed },
                    { header: 'cleanup', get: (d) => d.cleanup_action ?? '-' },
                    { header: 'numa', get: (d) => (d.numa_node < 0 ? '-' : d.numa_node) },
                    { header: 'iommu', get: (d) => d.iommu_group ?? '-' },
                    {
                      header: 'health',
                      get: (d) => (d.health_reason ? `${d.health}: ${d.health_reason}` : d.health),
                      shrink: true,
                    },
                    { header: 'traits', get: (d) => d.traits, only: 'wide' },
                    { header: 'physfn', get: (d) => d.physfn || '-', only: 'wide' },
                  ],
                  { wide },
                );
          const excluded =
            result.excluded.length === 0
              ? ''
              : `\n\nExcluded (matched by a device_spec entry, not offered):\n${renderTable(
                  result.excluded,
                  [
                    { header: 'address', get: (e) => e.address, fixed: true },
                    { header: 'driver', get: (e) => e.driver },
                    { header: 'reason', get: (e) => e.reason, wrap: true },
                  ],
                  { wide },
                )}`;
          return `${devices}${excluded}`;
        }),
      );
      // What discovery found is printed either way. What only serve needs fails the dry
      // run with --serve; without it, a note (an operator trying a device_spec has no auth yet).
      try {
        await checkServe(config);
      } catch (err) {
        if (!(err instanceof ConfigError)) throw err;
        if (o.serve)
          throw new ConfigError(`${o.config}: ${err.message} (agent serve refuses this configuration)`);
        console.error(
          `berth: note: agent serve would refuse ${o.config}: ${err.message} (discovery works; --serve makes this an error)`,
        );
      }
    });

  withAgentFlags(agent.command('serve'))
    .description('run the host agent')
    .option('--listen <addr>', 'listen address host:port (overrides listen)')
    .option('--scheduler <addr>', 'scheduler address (overrides scheduler)')
    .action(async (o: AgentFlags) => {
      const config = await loadAgentConfig(o.config!, await overrides(o));
      const a = await Agent.start({ config }).catch((err: unknown) => {
        const flags: Record<string, string> = { [config.listen]: '--listen / listen' };
        if (config.metricsListen) flags[config.metricsListen] = 'metrics_listen';
        throw withListenHint(err, flags, 'another agent');
      });
      const stop = (signal: string) => {
        a.logger.info({ signal }, 'stopping');
        void a.stop().then(() => process.exit(0));
      };
      process.once('SIGTERM', () => stop('SIGTERM'));
      process.once('SIGINT', () => stop('SIGINT'));
      // Machine-readable line for scripts and tests: where the agent listens.
      console.log(JSON.stringify({ event: 'listening', endpoint: a.address, host: config.host }));
    });
}
