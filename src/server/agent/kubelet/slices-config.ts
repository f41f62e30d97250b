/**
 * The agent's optional `kubernetes.resource_slices` section (issue 39,
 * decision 76): this host's devices published as ResourceSlices on the API
 * server of `kubernetes.api_server`.
 *
 * ```yaml
 * kubernetes:
 *   api_server: { url: https://10.0.0.1:6443, token_file: …, ca_file: … }
 *   resource_slices:
 *     enabled: true
 *     driver: berth.dev        # the DRA driver name (the DRA plugin's)
 *     node_name: worker-3      # default: the agent's host
 *     pool: worker-3           # default: the agent's host
 *     resync_interval: 60      # seconds between full looks at the API server
 *     retry_interval: 1        # first retry after a failure; doubles up to resync_interval
 * ```
 */
import { z } from 'zod';
import { seconds, section, text } from '../../../config-schema.js';
import { ConfigError } from '../../../errors.js';
import { show } from '../../../plugins/device-spec/messages.js';

/** Who publishes the slices and for which node. */
export interface SliceTarget {
  /** The DRA driver name (a DNS subdomain, e.g. `berth.dev`). */
  driver: string;
  /** The pool: this Berth host. */
  pool: string;
  /** The Kubernetes node the devices are on. */
  nodeName: string;
}

/** A DNS subdomain (≤ 253, lower case): driver, node, pool and object names. */
const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export const isDnsSubdomain = (v: string): boolean => DNS_SUBDOMAIN.test(v);

export interface ResourceSlicesConfig extends SliceTarget {
  resyncMs: number;
  retryMs: number;
}

export const RESOURCE_SLICES_DEFAULTS = {
  driver: 'berth.dev',
  resyncInterval: 60,
  retryInterval: 1,
} as const;

const dnsSubdomain = (what: string, max = 253) =>
  text(what).superRefine((v, ctx) => {
    if (!isDnsSubdomain(v) || v.length > max) {
      ctx.addIssue({
        code: 'custom',
        message: `expected ${what}: a DNS subdomain of at most ${max} characters (lower case), got ${show(v)}`,
      });
    }
  });

export const resourceSlicesSectionSchema = section({
  enabled: z
    .boolean({ error: (iss) => `expected true or false, got ${show(iss.input)}` })
    .nullish()
    .describe('publish ResourceSlices (default false; needs kubernetes.api_server)'),
  driver: dnsSubdomain('a DRA driver name', 63)
    .nullish()
    .describe(`the DRA driver name (default ${RESOURCE_SLICES_DEFAULTS.driver})`),
  node_name: dnsSubdomain('a node name').nullish().describe("this host's Kubernetes node (default: host)"),
  pool: dnsSubdomain('a pool name').nullish().describe("the devices' pool (default: host)"),
  resync_interval: seconds(1, 86_400)
    .nullish()
    .describe(
      `seconds between full looks at the API server (default ${RESOURCE_SLICES_DEFAULTS.resyncInterval})`,
    ),
  retry_interval: seconds(0.05, 3_600)
    .nullish()
    .describe(
      `seconds before the first retry after a failure, doubling (default ${RESOURCE_SLICES_DEFAULTS.retryInterval})`,
    ),
}).describe('ResourceSlices of this host on the API server (docs/kubernetes.md)');

type Section = z.infer<typeof resourceSlicesSectionSchema>;

/** The publisher's settings, or null when it is not enabled; a ConfigError naming the key when they cannot work. */
export function resourceSlicesConfig(
  s: Section | null | undefined,
  host: string,
  apiServer: boolean,
): ResourceSlicesConfig | null {
  if (!s?.enabled) return null;
  const key = 'kubernetes.resource_slices';
  if (!apiServer) {
    throw new ConfigError(
      `${key}.enabled: ResourceSlices are published to an API server: set kubernetes.api_server`,
    );
  }
  for (const [field, given] of [
    ['node_name', s.node_name],
    ['pool', s.pool],
  ] as const) {
    if (!given && !isDnsSubdomain(host)) {
      throw new ConfigError(
        `${key}.${field}: the host name ${show(host)} is not a DNS subdomain (lower case): give ${field}`,
      );
    }
  }
  return {
    driver: s.driver ?? RESOURCE_SLICES_DEFAULTS.driver,
    nodeName: s.node_name ?? host,
    pool: s.pool ?? host,
    resyncMs: (s.resync_interval ?? RESOURCE_SLICES_DEFAULTS.resyncInterval) * 1000,
    retryMs: (s.retry_interval ?? RESOURCE_SLICES_DEFAULTS.retryInterval) * 1000,
  };
}
