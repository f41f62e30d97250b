/**
 * The agent's optional `kubernetes` section (issue 39, decision 74): the
 * kubelet's device plugin API served for this host's devices.
 *
 * ```yaml
 * kubernetes:
 *   device_plugin:
 *     enabled: true
 *     kubelet_socket_dir: /var/lib/kubelet/device-plugins
 *     pod_resources_socket: /var/lib/kubelet/pod-resources/kubelet.sock
 *     resource_prefix: berth.dev/
 *     resource_names: { CUSTOM_NVME: example.com/fast-nvme }
 *     poll_interval: 5
 *     unclaimed_grace: 300
 *     scheduler_token_file: /etc/berth/k8s-token
 *     cdi: true                # Allocate also writes a CDI spec and answers its device names
 *     cdi_dir: /var/run/cdi
 *   api_server:            # api-server.ts
 *     url: https://10.0.0.1:6443
 *     token_file: /var/run/secrets/kubernetes.io/serviceaccount/token
 *     ca_file: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
 *   dra:
 *     enabled: true
 *     driver_name: berth.dev
 *     plugins_registry_dir: /var/lib/kubelet/plugins_registry
 *     plugin_dir: /var/lib/kubelet/plugins/berth.dev
 *     cdi_dir: /var/run/cdi
 *     checkpoint_file: /var/lib/berth/kubelet-dra.json
 * ```
 */
import { resolve } from 'node:path';
import { z } from 'zod';
import { seconds, section, text } from '../../../config-schema.js';
import { show } from '../../../plugins/device-spec/messages.js';
import { apiServerSectionSchema } from './api-server.js';
import { resourceSlicesSectionSchema } from './slices-config.js';

export interface DevicePluginConfig {
  /** Where the kubelet's `kubelet.sock` (Registration) is, and where each resource's own socket is made. */
  kubeletSocketDir: string;
  /** The kubelet's PodResourcesLister socket (which pod holds which device). */
  podResourcesSocket: string;
  /** Resource class → extended resource name; classes not named get `resourcePrefix` + the class in lower case. */
  resourceNames: Record<string, string>;
  resourcePrefix: string;
  /** Seconds between looks at pod-resources and at the kubelet's socket. */
  pollIntervalMs: number;
  /** Seconds a device given by Allocate may go unseen in pod-resources before it is released (a pod refused after Allocate). */
  unclaimedGraceMs: number;
  /** The bearer token of the scheduler calls that hold and release devices (role host-client for this host, decision 90; service or admin work, wider); null: the agent's own. */
  schedulerTokenFile: string | null;
  /**
   * When set, Allocate also writes a CDI spec per container (vendor: the DRA
   * driver name, kind `<vendor>/pci`, ./cdi.ts) in `dir` and answers its
   * device names; the spec goes when Berth releases the devices.
   */
  cdi: { dir: string; vendor: string } | null;
}

/** The kubelet's own defaults. */
export const DEVICE_PLUGIN_DEFAULTS = {
  kubeletSocketDir: '/var/lib/kubelet/device-plugins',
  podResourcesSocket: '/var/lib/kubelet/pod-resources/kubelet.sock',
  resourcePrefix: 'berth.dev/',
  pollInterval: 5,
  unclaimedGrace: 300,
  cdiDir: '/var/run/cdi',
} as const;

// An extended resource name: a DNS subdomain prefix (not kubernetes.io), a slash, and a name of at most 63 characters.
const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const NAME = /^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;

/** Why `v` is not an extended resource name Kubernetes accepts for a device plugin, or null. */
export function resourceNameProblem(v: string): string | null {
  const slash = v.indexOf('/');
  const domain = v.slice(0, slash);
  const name = v.slice(slash + 1);
  if (slash < 0 || !DNS_SUBDOMAIN.test(domain) || !NAME.test(name)) {
    return `expected an extended resource name "domain/name" (a DNS subdomain, a name of 1-63 [A-Za-z0-9-_.]), got ${show(v)}`;
  }
  if (domain === 'kubernetes.io' || domain.endsWith('.kubernetes.io')) {
    return `${show(v)}: the kubernetes.io domain is reserved to Kubernetes`;
  }
  return null;
}

const resourceName = text('an extended resource name').superRefine((v, ctx) => {
  const problem = resourceNameProblem(v);
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});

const prefix = text('a resource name prefix').superRefine((v, ctx) => {
  const problem = v.endsWith('/')
    ? resourceNameProblem(`${v}x`)
    : `expected a prefix ending in "/", got ${show(v)}`;
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});

export const devicePluginSectionSchema = section({
  enabled: z
    .boolean({ error: (iss) => `expected true or false, got ${show(iss.input)}` })
    .nullish()
    .describe('serve the device plugin (default false)'),
  kubelet_socket_dir: text()
    .nullish()
    .describe(`the kubelet's device plugin directory (default ${DEVICE_PLUGIN_DEFAULTS.kubeletSocketDir})`),
  pod_resources_socket: text()
    .nullish()
    .describe(`the kubelet's pod-resources socket (default ${DEVICE_PLUGIN_DEFAULTS.podResourcesSocket})`),
  resource_prefix: prefix
    .nullish()
    .describe(
      `prefix of the resource names not given in resource_names (default ${DEVICE_PLUGIN_DEFAULTS.resourcePrefix})`,
    ),
  resource_names: z
    .record(z.string(), resourceName, {
      error: (iss) => `expected a mapping of resource class to resource name, got ${show(iss.input)}`,
    })
    .nullish()
    .describe('resource class → extended resource name'),
  poll_interval: seconds(0.05, 3_600)
    .nullish()
    .describe('seconds between looks at pod-resources and at the kubelet socket (default 5)'),
  unclaimed_grace: seconds(0, 86_400)
    .nullish()
    .describe(
      'seconds a device given by Allocate may go unseen in pod-resources before it is released (default 300)',
    ),
  scheduler_token_file: text()
    .nullish()
    .describe(
      'token (role host-client, its subject the host; decision 90) of the scheduler calls that hold and release devices (default: scheduler_token_file)',
    ),
  cdi: z
    .boolean({ error: (iss) => `expected true or false, got ${show(iss.input)}` })
    .nullish()
    .describe('Allocate also writes a CDI spec and answers its CDI device names (default false)'),
  cdi_dir: text()
    .nullish()
    .describe(`where the CDI specs of allocations are written (default ${DEVICE_PLUGIN_DEFAULTS.cdiDir})`),
}).describe("the kubelet's device plugin API (docs/kubernetes.md)");

export interface DraConfig {
  /** The DRA driver name: the `driver` of a ResourceClaim's results that are Berth's, and the CDI vendor. */
  driverName: string;
  /** This host's pool: its devices' `pool` in the ResourceSlices and in a claim's results (kubernetes.resource_slices.pool, else the host). */
  pool: string;
  /** Where the kubelet looks for plugin registration sockets (`<driver>-reg.sock` is made there). */
  pluginsRegistryDir: string;
  /** Where the plugin's own socket (`dra.sock`) is made. */
  pluginDir: string;
  /** Where the CDI specs of prepared claims are written (a directory the container runtime reads). */
  cdiDir: string;
  /** The claims prepared, by UID: survives an agent restart (written whole, atomically). */
  checkpointFile: string;
  /** Resource names for KubeVirt's variable: the device plugin's, so that one name serves both. */
  resourceNames: Record<string, string>;
  resourcePrefix: string;
  schedulerTokenFile: string | null;
}

export const DRA_DEFAULTS = {
  driverName: 'berth.dev',
  pluginsRegistryDir: '/var/lib/kubelet/plugins_registry',
  pluginsDir: '/var/lib/kubelet/plugins',
  cdiDir: '/var/run/cdi',
  checkpointFile: 'kubelet-dra.json',
} as const;

const driverName = text('a DRA driver name').superRefine((v, ctx) => {
  if (!DNS_SUBDOMAIN.test(v) || v.length > 63) {
    ctx.addIssue({
      code: 'custom',
      message: `expected a DNS subdomain of at most 63 characters (e.g. berth.dev), got ${show(v)}`,
    });
  }
});

export const draSectionSchema = section({
  enabled: z
    .boolean({ error: (iss) => `expected true or false, got ${show(iss.input)}` })
    .nullish()
    .describe('serve the DRA kubelet plugin (default false)'),
  driver_name: driverName.nullish().describe(`the DRA driver name (default ${DRA_DEFAULTS.driverName})`),
  plugins_registry_dir: text()
    .nullish()
    .describe(`the kubelet's plugin registration directory (default ${DRA_DEFAULTS.pluginsRegistryDir})`),
  plugin_dir: text()
    .nullish()
    .describe(`the plugin's socket directory (default ${DRA_DEFAULTS.pluginsDir}/<driver_name>)`),
  cdi_dir: text().nullish().describe(`where CDI specs are written (default ${DRA_DEFAULTS.cdiDir})`),
  checkpoint_file: text()
    .nullish()
    .describe(`the prepared claims (default <state_dir>/${DRA_DEFAULTS.checkpointFile})`),
  scheduler_token_file: text()
    .nullish()
    .describe(
      'token (role host-client, its subject the host; decision 90) of the scheduler calls that hold and release devices (default: scheduler_token_file)',
    ),
}).describe("the kubelet's DRA plugin API (docs/kubernetes.md)");

export const kubernetesSectionSchema = section({
  device_plugin: devicePluginSectionSchema.nullish(),
  api_server: apiServerSectionSchema.nullish(),
  dra: draSectionSchema.nullish(),
  resource_slices: resourceSlicesSectionSchema.nullish(),
}).describe('Kubernetes: kubelet plugins and the API server (docs/kubernetes.md)');

type Section = z.infer<typeof kubernetesSectionSchema>;

/** The device plugin's settings, or null when it is not enabled. */
export function devicePluginConfig(
  c: Section | null | undefined,
  baseDir: string,
): DevicePluginConfig | null {
  const d = c?.device_plugin;
  if (!d?.enabled) return null;
  return {
    kubeletSocketDir: resolve(baseDir, d.kubelet_socket_dir ?? DEVICE_PLUGIN_DEFAULTS.kubeletSocketDir),
    podResourcesSocket: resolve(baseDir, d.pod_resources_socket ?? DEVICE_PLUGIN_DEFAULTS.podResourcesSocket),
    resourceNames: { ...(d.resource_names ?? {}) },
    resourcePrefix: d.resource_prefix ?? DEVICE_PLUGIN_DEFAULTS.resourcePrefix,
    pollIntervalMs: (d.poll_interval ?? DEVICE_PLUGIN_DEFAULTS.pollInterval) * 1000,
    unclaimedGraceMs: (d.unclaimed_grace ?? DEVICE_PLUGIN_DEFAULTS.unclaimedGrace) * 1000,
    schedulerTokenFile: d.scheduler_token_file ? resolve(baseDir, d.scheduler_token_file) : null,
    cdi: d.cdi
      ? {
          dir: resolve(baseDir, d.cdi_dir ?? DEVICE_PLUGIN_DEFAULTS.cdiDir),
          vendor: c?.dra?.driver_name ?? DRA_DEFAULTS.driverName,
        }
      : null,
  };
}

/** The DRA plugin's settings, or null when it is not enabled. */
export function draConfig(
  c: Section | null | undefined,
  baseDir: string,
  stateDir: string,
  pool: string,
): DraConfig | null {
  const d = c?.dra;
  if (!d?.enabled) return null;
  const name = d.driver_name ?? DRA_DEFAULTS.driverName;
  const at = (v: string | null | undefined) => (v ? resolve(baseDir, v) : null);
  return {
    driverName: name,
    pool,
    pluginsRegistryDir: resolve(baseDir, d.plugins_registry_dir ?? DRA_DEFAULTS.pluginsRegistryDir),
    pluginDir: resolve(baseDir, d.plugin_dir ?? `${DRA_DEFAULTS.pluginsDir}/${name}`),
    cdiDir: resolve(baseDir, d.cdi_dir ?? DRA_DEFAULTS.cdiDir),
    checkpointFile: resolve(stateDir, d.checkpoint_file ?? DRA_DEFAULTS.checkpointFile),
    resourceNames: { ...(c?.device_plugin?.resource_names ?? {}) },
    resourcePrefix: c?.device_plugin?.resource_prefix ?? DEVICE_PLUGIN_DEFAULTS.resourcePrefix,
    schedulerTokenFile: at(d.scheduler_token_file),
  };
}
