/**
 * The Kubernetes API server the agent publishes to (issue 39): the
 * `kubernetes.api_server` section of the agent's configuration, and the
 * client built from it with Kubernetes' own client library
 * (`@kubernetes/client-node`).
 *
 * ```yaml
 * kubernetes:
 *   api_server:
 *     url: https://10.0.0.1:6443
 *     token_file: /var/run/secrets/kubernetes.io/serviceaccount/token
 *     ca_file: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
 * ```
 *
 * A bearer token is only ever sent over https: `token_file` (and `ca_file`)
 * with an `http://` URL is refused. The files are read when the client is
 * built, so a missing or empty one is a ConfigError naming its key.
 */
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { ResourceV1Api } from '@kubernetes/client-node';
import { httpUrl, readSecretFile, section, text } from '../../../config-schema.js';
import { ConfigError } from '../../../errors.js';
import { show } from '../../../plugins/device-spec/messages.js';

export interface ApiServerConfig {
  /** The API server's base URL (`https://host:6443`; `http://` only without a token, e.g. a local proxy). */
  url: string;
  /** File holding the bearer token (a service account's); null sends none. */
  tokenFile: string | null;
  /** PEM bundle the server's certificate must chain to; null uses Node's default roots. */
  caFile: string | null;
}

export const apiServerSectionSchema = section({
  url: httpUrl().describe('the Kubernetes API server (https://host:6443)'),
  token_file: text()
    .nullish()
    .describe('file holding the bearer token (a service account token); https only'),
  ca_file: text().nullish().describe("PEM file of the CA the API server's certificate chains to; https only"),
})
  .superRefine((s, ctx) => {
    if (!s.url.startsWith('http://')) return;
    for (const key of ['token_file', 'ca_file'] as const) {
      if (s[key]) {
        ctx.addIssue({
          code: 'custom',
          path: [key],
          message: `given with the plain http URL ${show(s.url)}: a token and a CA are used over https only`,
        });
      }
    }
  })
  .describe('the Kubernetes API server ResourceSlices are published to (docs/kubernetes.md)');

/** The section's settings with its paths resolved from `baseDir`, or null when there is no section. */
export function apiServerConfig(
  s: { url: string; token_file?: string | null; ca_file?: string | null } | null | undefined,
  baseDir: string,
): ApiServerConfig | null {
  if (!s) return null;
  return {
    url: s.url.replace(/\/+$/, ''),
    tokenFile: s.token_file ? resolve(baseDir, s.token_file) : null,
    caFile: s.ca_file ? resolve(baseDir, s.ca_file) : null,
  };
}

const KEY = 'kubernetes.api_server';

/**
 * A `resource.k8s.io/v1` client for the configured API server. The token
 * and CA are read now: an unreadable or empty file, or a CA file without a
 * PEM certificate, is a ConfigError naming its key and path.
 */
export async function resourceApiClient(cfg: ApiServerConfig): Promise<ResourceV1Api> {
  const token = cfg.tokenFile ? await readSecretFile(cfg.tokenFile, `${KEY}.token_file`) : undefined;
  let caData: string | undefined;
  if (cfg.caFile) {
    let pem: string;
    try {
      pem = await readFile(cfg.caFile, 'utf8');
    } catch (err) {
      throw new ConfigError(`${KEY}.ca_file: cannot read ${show(cfg.caFile)}: ${(err as Error).message}`);
    }
    if (!pem.includes('-----BEGIN CERTIFICATE-----')) {
      throw new ConfigError(`${KEY}.ca_file: ${show(cfg.caFile)} holds no PEM certificate`);
    }
    caData = Buffer.from(pem).toString('base64');
  }
  // Loaded here, not at the top: the library is about 80 MB of an agent's
  // memory, which an agent that does not speak to Kubernetes must not pay.
  const { KubeConfig, ResourceV1Api } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  // client-node refuses a plain http server unless skipTLSVerify is set; over https it stays false.
  const plain = cfg.url.startsWith('http://');
  kc.loadFromOptions({
    clusters: [{ name: 'berth', server: cfg.url, skipTLSVerify: plain, ...(caData ? { caData } : {}) }],
    users: [{ name: 'berth', ...(token ? { token } : {}) }],
    contexts: [{ name: 'berth', cluster: 'berth', user: 'berth' }],
    currentContext: 'berth',
  });
  return kc.makeApiClient(ResourceV1Api);
}
