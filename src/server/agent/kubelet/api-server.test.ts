import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { makeCa } from '../../../../test/helpers/certs.js';
import { ConfigError } from '../../../errors.js';
import { parseAgentConfig } from '../config.js';
import { resourceApiClient } from './api-server.js';

const parse = (api_server: unknown) =>
  parseAgentConfig({ sysfs_root: '/', kubernetes: { api_server } }, {}, '/etc/berth');

describe('agent config: kubernetes.api_server', () => {
  it('is absent unless given; relative files resolve from the configuration file', () => {
    expect(parseAgentConfig({ sysfs_root: '/' }, {}, '/tmp').kubernetesApiServer).toBeNull();
    expect(
      parse({ url: 'https://10.0.0.1:6443/', token_file: 'k8s/token', ca_file: '/etc/k8s/ca.crt' })
        .kubernetesApiServer,
    ).toEqual({ url: 'https://10.0.0.1:6443', tokenFile: '/etc/berth/k8s/token', caFile: '/etc/k8s/ca.crt' });
    expect(parse({ url: 'http://127.0.0.1:8001' }).kubernetesApiServer).toEqual({
      url: 'http://127.0.0.1:8001',
      tokenFile: null,
      caFile: null,
    });
  });

  it('names the field and the value of every mistake', () => {
    const refused = (s: unknown) => {
      try {
        parse(s);
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        return (err as Error).message;
      }
      throw new Error(`accepted ${JSON.stringify(s)}`);
    };
    expect(refused({})).toMatch(/^kubernetes\.api_server\.url: expected an http\(s\) URL/);
    expect(refused({ url: 'ftp://k8s:21' })).toBe(
      'kubernetes.api_server.url: expected an http(s) URL, got "ftp://k8s:21"',
    );
    expect(refused({ url: 'https://k8s:6443', token_file: '' })).toMatch(
      /^kubernetes\.api_server\.token_file: /,
    );
    expect(refused({ url: 'http://k8s:8080', token_file: '/t' })).toBe(
      'kubernetes.api_server.token_file: given with the plain http URL "http://k8s:8080": a token and a CA are used over https only',
    );
    expect(refused({ url: 'http://k8s:8080', ca_file: '/ca' })).toMatch(/^kubernetes\.api_server\.ca_file: /);
    expect(refused({ url: 'https://k8s:6443', insecure: true })).toMatch(
      /^kubernetes\.api_server\.insecure: unknown key/,
    );
    expect(refused('https://k8s:6443')).toMatch(/^kubernetes\.api_server: expected a mapping/);
  });
});

describe('the resource.k8s.io/v1 client (@kubernetes/client-node)', () => {
  const closers: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0)) await c();
  });
  const tmpDir = async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-k8s-api-'));
    closers.push(() => rm(dir, { recursive: true, force: true }));
    return dir;
  };

  /** An https stand-in that records each request and answers an empty ResourceSliceList. */
  async function standIn(dir: string) {
    const ca = await makeCa(dir, 'k8s-ca');
    const leaf = await ca.leaf('kube-apiserver');
    const seen: { method: string; url: string; authorization: string | undefined }[] = [];
    const server = createServer(
      { cert: await readFile(leaf.cert), key: await readFile(leaf.key) },
      (req, res) => {
        seen.push({ method: req.method ?? '', url: req.url ?? '', authorization: req.headers.authorization });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            apiVersion: 'resource.k8s.io/v1',
            kind: 'ResourceSliceList',
            metadata: {},
            items: [],
          }),
        );
      },
    );
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
    closers.push(() => server.close());
    return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, ca: ca.ca, seen };
  }

  it('speaks to the API server over https, trusting ca_file, with the token from token_file', async () => {
    const dir = await tmpDir();
    const s = await standIn(dir);
    await writeFile(join(dir, 'token'), 'tok-123\n');
    const api = await resourceApiClient({ url: s.url, tokenFile: join(dir, 'token'), caFile: s.ca });
    const list = await api.listResourceSlice({ fieldSelector: 'spec.nodeName=h1' });
    expect(list.items).toEqual([]);
    expect(s.seen).toEqual([
      {
        method: 'GET',
        url: '/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dh1',
        authorization: 'Bearer tok-123',
      },
    ]);
  });

  it('refuses a server whose certificate does not chain to ca_file', async () => {
    const dir = await tmpDir();
    const s = await standIn(dir);
    const other = await makeCa(dir, 'other-ca');
    const api = await resourceApiClient({ url: s.url, tokenFile: null, caFile: other.ca });
    await expect(api.listResourceSlice()).rejects.toThrow();
    expect(s.seen).toEqual([]);
  });

  it('reads the files at once: a missing, empty or non-PEM one is a ConfigError naming its key', async () => {
    const dir = await tmpDir();
    await writeFile(join(dir, 'empty'), '\n');
    await writeFile(join(dir, 'not-pem'), 'hello');
    const url = 'https://127.0.0.1:1';
    await expect(resourceApiClient({ url, tokenFile: join(dir, 'none'), caFile: null })).rejects.toThrow(
      /^kubernetes\.api_server\.token_file: cannot read ".*\/none"/,
    );
    await expect(resourceApiClient({ url, tokenFile: join(dir, 'empty'), caFile: null })).rejects.toThrow(
      /^kubernetes\.api_server\.token_file: ".*\/empty" is empty/,
    );
    await expect(resourceApiClient({ url, tokenFile: null, caFile: join(dir, 'none') })).rejects.toThrow(
      /^kubernetes\.api_server\.ca_file: cannot read/,
    );
    await expect(resourceApiClient({ url, tokenFile: null, caFile: join(dir, 'not-pem') })).rejects.toThrow(
      'kubernetes.api_server.ca_file: "' + join(dir, 'not-pem') + '" holds no PEM certificate',
    );
  });
});

describe('agent config: kubernetes.resource_slices', () => {
  const parseWith = (resource_slices: unknown, host = 'worker-3', api = true) =>
    parseAgentConfig(
      {
        sysfs_root: '/',
        host,
        kubernetes: { ...(api ? { api_server: { url: 'https://k8s:6443' } } : {}), resource_slices },
      },
      {},
      '/etc/berth',
    );

  it('is off unless enabled; defaults the driver, node and pool from the host', () => {
    expect(parseWith({ enabled: false }).resourceSlices).toBeNull();
    expect(parseWith({ enabled: true }).resourceSlices).toEqual({
      driver: 'berth.dev',
      nodeName: 'worker-3',
      pool: 'worker-3',
      resyncMs: 60_000,
      retryMs: 1_000,
    });
    expect(
      parseWith(
        { enabled: true, driver: 'gpu.example.com', node_name: 'n1', pool: 'p1', resync_interval: 5 },
        'Host_1',
      ).resourceSlices,
    ).toMatchObject({ driver: 'gpu.example.com', nodeName: 'n1', pool: 'p1', resyncMs: 5_000 });
  });

  it('names the field and value of every mistake', () => {
    expect(() => parseWith({ enabled: true }, 'worker-3', false)).toThrow(
      'kubernetes.resource_slices.enabled: ResourceSlices are published to an API server: set kubernetes.api_server',
    );
    expect(() => parseWith({ enabled: true }, 'Host_1')).toThrow(
      'kubernetes.resource_slices.node_name: the host name "Host_1" is not a DNS subdomain (lower case): give node_name',
    );
    expect(() => parseWith({ enabled: true, node_name: 'n1' }, 'Host_1')).toThrow(
      /^kubernetes\.resource_slices\.pool: /,
    );
    expect(() => parseWith({ enabled: true, driver: 'Berth.Dev' })).toThrow(
      'kubernetes.resource_slices.driver: expected a DRA driver name: a DNS subdomain of at most 63 characters (lower case), got "Berth.Dev"',
    );
    expect(() => parseWith({ enabled: true, resync_interval: 0 })).toThrow(
      /^kubernetes\.resource_slices\.resync_interval: /,
    );
    expect(() => parseWith({ enabled: 'yes' })).toThrow(
      'kubernetes.resource_slices.enabled: expected true or false, got "yes"',
    );
  });
});
