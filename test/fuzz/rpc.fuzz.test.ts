/**
 * Fuzzing every scheduler RPC over gRPC. For each served method, arbitrary
 * JSON built from the field names the generated code knows (so requests get
 * past "field missing" into the real validation) goes through the method's
 * own `fromJSON` and `encode`, and is sent with an admin token to a running
 * scheduler that follows a real agent on a simulated host. Raw random bytes
 * are sent too. Properties: the server never answers INTERNAL or UNKNOWN,
 * never refuses the admin, every INVALID_ARGUMENT carries field violations
 * naming a field, and the server is still healthy afterwards.
 * FUZZ_RUNS=100000 for the long run.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, credentials } from '@grpc/grpc-js';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { propertyRuns } from '../../src/plugins/device-spec/arbitraries.support.js';
import { isOpenMethod } from '../../src/server/grpc/auth/policy.js';
import { generateStaticToken } from '../../src/server/grpc/auth/tokens.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { type GeneratedMethod, generatedMethods } from '../helpers/grpc-services.js';
import { metadataWith, rawCall } from '../helpers/raw-call.js';
import { eventually } from '../helpers/wait.js';

/** Per-test timeout that grows with FUZZ_RUNS (about 10 ms a call, with headroom). */
const TIMEOUT_MS = Math.max(120_000, propertyRuns(1_000) * 30);

const GEN = fileURLToPath(new URL('../../src/gen/berth', import.meta.url));

/** Every JSON field name the generated fromJSON functions read. */
function fieldNames(): string[] {
  const names = new Set<string>();
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ts')) {
        for (const m of readFileSync(p, 'utf8').matchAll(/isSet\(object\.(\w+)\)/g)) names.add(m[1]!);
      }
    }
  };
  walk(GEN);
  return [...names].sort();
}

const plausibleStrings = fc.constantFrom(
  '',
  'sim-host-1',
  'fuzz-host',
  '0000:3b:00.0',
  '0000:3b:02.1',
  '0000:3B:00.0',
  '0000:3b:00.8',
  '../../../etc/passwd',
  '$(reboot)',
  '; rm -rf /',
  '00000000-0000-0000-0000-000000000000',
  '9f1c3c1e-7d7e-4b43-9a43-4b7a1b7e2a11',
  'CUSTOM_NVME',
  'PGPU',
  'a'.repeat(300),
  'é\u0000\u202e',
  'nvme0',
  'DEVICE_STATE_AVAILABLE',
  'DEVICE_STATUS_MAINTAINING',
);

function requestJson(keys: string[]): fc.Arbitrary<unknown> {
  const { value } = fc.letrec((tie) => ({
    value: fc.oneof(
      { depthSize: 'small', withCrossShrink: true },
      { weight: 4, arbitrary: fc.oneof(plausibleStrings, fc.string({ maxLength: 20 })) },
      { weight: 2, arbitrary: fc.oneof(fc.integer(), fc.integer({ min: -2, max: 10 }), fc.double()) },
      { weight: 1, arbitrary: fc.boolean() },
      { weight: 2, arbitrary: fc.array(tie('value'), { maxLength: 4 }) },
      { weight: 1, arbitrary: fc.array(plausibleStrings, { minLength: 60, maxLength: 300 }) },
      { weight: 3, arbitrary: tie('object') },
    ),
    object: fc.dictionary(fc.constantFrom(...keys), tie('value'), { maxKeys: 5 }),
  }));
  return fc.dictionary(fc.constantFrom(...keys), value, { maxKeys: 6 });
}

/** Encodes `json` as the method's request, or null when the client side itself cannot. */
function encode(m: GeneratedMethod, json: unknown): Buffer | null {
  try {
    const msg = m.request.fromJSON(json) as Record<string, unknown>;
    // Register makes the scheduler dial the endpoint: keep that on loopback, on a closed port.
    if (m.name === 'Register' && msg.endpoint) msg.endpoint = '127.0.0.1:1';
    return Buffer.from(m.request.encode(msg).finish());
  } catch {
    return null;
  }
}

describe('fuzz: every scheduler RPC', () => {
  let c: Cluster;
  let client: Client;
  let methods: GeneratedMethod[];
  const admin = generateStaticToken();
  const agentToken = generateStaticToken();

  beforeAll(async () => {
    c = await startCluster([demoHostDefinition('sim-host-1')], {
      scheduler: {
        auth: {
          mode: 'token',
          staticTokens: [
            { token: admin, roles: ['admin'] },
            // An agent principal speaks for its own host only (invariant 10).
            { token: agentToken, roles: ['agent'], subject: 'sim-host-1' },
          ],
        },
      },
      agent: { schedulerToken: agentToken, auth: { mode: 'none' } },
    });
    await eventually(
      () => c.scheduler.useCases.listHosts().then((p) => p.hosts),
      (hs) => hs.some((h) => h.connected),
      15_000,
    );
    client = new Client(c.scheduler.address, credentials.createInsecure());
    const served = new Set(c.scheduler.server.methodPaths().filter((p) => !isOpenMethod(p)));
    methods = generatedMethods().filter((m) => served.has(m.path));
  }, 60_000);
  afterAll(async () => {
    client?.close();
    await c?.stop();
  });

  function check(m: GeneratedMethod, st: Awaited<ReturnType<typeof rawCall>>): void {
    const where = `${m.path}: ${st.codeName} ${st.message}`;
    expect(
      ['INTERNAL', 'UNKNOWN', 'UNAUTHENTICATED', 'PERMISSION_DENIED', 'UNIMPLEMENTED'],
      where,
    ).not.toContain(st.codeName);
    if (st.codeName === 'INVALID_ARGUMENT') {
      expect(st.fieldViolations.length, where).toBeGreaterThan(0);
      for (const v of st.fieldViolations) expect(v.field, where).toMatch(/^[a-z_][a-z0-9_.[\]]*$/);
    }
  }

  it(
    'answers arbitrary well-typed requests with a proper status',
    async () => {
      expect(methods.length).toBeGreaterThanOrEqual(20);
      const keys = fieldNames();
      const md = () => metadataWith(`Bearer ${admin}`);
      let sent = 0;
      const seen = new Map<string, number>();
      await fc.assert(
        fc.asyncProperty(fc.nat({ max: methods.length - 1 }), requestJson(keys), async (i, json) => {
          const m = methods[i]!;
          const body = encode(m, json);
          if (!body) return;
          sent++;
          const st = await rawCall(client, m, body, md(), { streamIdleMs: 30 });
          seen.set(st.codeName, (seen.get(st.codeName) ?? 0) + 1);
          check(m, st);
        }),
        { numRuns: propertyRuns(1_000) },
      );
      expect(sent).toBeGreaterThan(propertyRuns(1_000) / 2);
      // Not vacuous: requests got past validation as well as being refused by it.
      expect(seen.get('INVALID_ARGUMENT') ?? 0, JSON.stringify([...seen])).toBeGreaterThan(0);
      expect((seen.get('OK') ?? 0) + (seen.get('NOT_FOUND') ?? 0), JSON.stringify([...seen])).toBeGreaterThan(
        0,
      );
    },
    TIMEOUT_MS,
  );

  it(
    'answers random bytes with INVALID_ARGUMENT naming the request, never INTERNAL',
    async () => {
      const md = () => metadataWith(`Bearer ${admin}`);
      await fc.assert(
        fc.asyncProperty(
          fc.nat({ max: methods.length - 1 }),
          fc.uint8Array({ minLength: 1, maxLength: 64 }),
          async (i, bytes) => {
            const m = methods[i]!;
            check(m, await rawCall(client, m, Buffer.from(bytes), md(), { streamIdleMs: 30 }));
          },
        ),
        { numRuns: propertyRuns(400) },
      );
      // One that certainly does not decode (a truncated length-delimited field).
      const st = await rawCall(client, methods[0]!, Buffer.from([0x0a, 0x10, 0x41]), md());
      expect(st.codeName).toBe('INVALID_ARGUMENT');
      expect(st.fieldViolations[0]!.field).toBe('request');
    },
    TIMEOUT_MS,
  );

  it('is still serving', async () => {
    const st = await rawCall(
      client,
      { path: '/grpc.health.v1.Health/Check', responseStream: false },
      Buffer.alloc(0),
      metadataWith(),
    );
    expect(st.codeName).toBe('OK');
    expect((await c.scheduler.useCases.listHosts()).hosts.length).toBeGreaterThan(0);
  });
});
