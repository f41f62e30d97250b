/**
 * Fuzzing the agent's configuration surface: device_spec entries (through the
 * shared arbitraries) and whole agent config documents (parseAgentConfig),
 * including the security sections. The only acceptable outcomes are a valid
 * config or a ConfigError whose message names the offending key; nothing else
 * may escape (TypeError, RangeError…), and a config accepted once is accepted
 * identically again. FUZZ_RUNS=100000 for the long run.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { keyPathOf } from '../../src/config-schema.js';
import { ConfigError } from '../../src/errors.js';
import {
  deviceSpecInput,
  plausibleValue,
  propertyRuns,
} from '../../src/plugins/device-spec/arbitraries.support.js';
import { parseDeviceSpecs } from '../../src/plugins/device-spec/parse.js';
import { parseAgentConfig, TOP_LEVEL_KEYS } from '../../src/server/agent/config.js';
import { parseStaticTokens } from '../../src/server/grpc/auth/configuration.js';

// The fuzz keeps up with the config's key list by reading it.
const TOP_KEYS = [...TOP_LEVEL_KEYS];

const address = fc.oneof(
  fc.constantFrom('127.0.0.1:7071', '[::1]:7072', 'localhost:0', 'h:99999', ':80', 'a b:1'),
  fc.tuple(fc.string({ maxLength: 8 }), fc.integer({ min: -1, max: 70_000 })).map(([h, p]) => `${h}:${p}`),
);

const authSection = fc.oneof(
  fc.constant({ mode: 'none' }),
  fc.dictionary(
    fc.constantFrom(
      'mode',
      'static_tokens_file',
      'jwt_secret_file',
      'jwt_public_key_file',
      'jwks_file',
      'jwt_issuer',
      'jwt_audience',
      'cert_roles',
      'bogus',
    ),
    fc.oneof(plausibleValue, fc.constantFrom('token', 'none', '/etc/x', { 'berth-scheduler': 'scheduler' })),
    { maxKeys: 4 },
  ),
  plausibleValue,
);

const tlsSection = fc.oneof(
  fc.dictionary(fc.constantFrom('cert', 'key', 'ca', 'crt'), fc.oneof(plausibleValue, fc.constant('a.pem')), {
    maxKeys: 3,
  }),
  plausibleValue,
);

const configDoc: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  {
    weight: 6,
    arbitrary: fc.dictionary(
      fc.oneof(
        { weight: 12, arbitrary: fc.constantFrom(...TOP_KEYS) },
        { weight: 1, arbitrary: fc.constantFrom('pci', 'nvme', 'pcie', '__proto__', 'constructor') },
        { weight: 1, arbitrary: fc.string({ maxLength: 10 }) },
      ),
      fc.oneof(plausibleValue, address, authSection, tlsSection, fc.double(), fc.integer()),
      { maxKeys: 7 },
    ),
  },
);

describe('fuzz: agent configuration', () => {
  it(
    'parseAgentConfig returns a config or a ConfigError naming a key, deterministically',
    () => {
      fc.assert(
        fc.property(configDoc, (doc) => {
          let first: unknown;
          try {
            first = parseAgentConfig(doc, {}, '/base');
          } catch (err) {
            if (!(err instanceof ConfigError)) throw err;
            expect(err.message.length).toBeGreaterThan(5);
            // It names the offending key: the root of its key path (`tls.cert: …`) is a key
            // of the document, or it is about the whole document.
            const docKeys = doc && typeof doc === 'object' && !Array.isArray(doc) ? Object.keys(doc) : [];
            // (A key that is not a plain word is shown quoted: `[""]: …`.)
            const named = docKeys.some((k) =>
              [':', '.', '['].some((next) => err.message.startsWith(`${keyPathOf([k])}${next}`)),
            );
            expect(named || err.message.startsWith('the configuration'), err.message).toBe(true);
            return;
          }
          const again = parseAgentConfig(structuredClone(doc), {}, '/base');
          expect(again).toEqual(first);
          const cfg = first as ReturnType<typeof parseAgentConfig>;
          // Security sections, when accepted, are well-formed.
          if (cfg.tls) expect(cfg.tls.cert && cfg.tls.key).toBeTruthy();
          if (cfg.auth && cfg.auth.mode !== 'none') {
            const sources = [
              cfg.auth.staticTokensFile,
              cfg.auth.jwtSecretFile,
              cfg.auth.jwtPublicKeyFile,
              cfg.auth.jwksFile,
              cfg.auth.certRoles,
            ];
            expect(sources.some((s) => s !== undefined)).toBe(true);
          }
        }),
        { numRuns: propertyRuns(3_000) },
      );
    },
    Math.max(30_000, propertyRuns(3_000) * 5),
  );

  it(
    'device_spec entries parse or fail with a ConfigError naming the entry',
    () => {
      fc.assert(
        fc.property(deviceSpecInput, fc.boolean(), (raw, cleanupKeys) => {
          try {
            parseDeviceSpecs(raw, { section: 'pci', cleanupKeys });
          } catch (err) {
            if (!(err instanceof ConfigError)) throw err;
            expect(err.message).toMatch(/^pci\.device_spec\[\d+\]/);
          }
        }),
        { numRuns: propertyRuns(3_000) },
      );
    },
    Math.max(30_000, propertyRuns(3_000) * 5),
  );

  it(
    'static token files parse or fail with a ConfigError, and never accept a short token',
    () => {
      fc.assert(
        fc.property(
          fc.oneof(
            fc.string({ maxLength: 80 }),
            fc
              .array(
                fc.tuple(
                  fc
                    .string({ minLength: 0, maxLength: 30 })
                    .filter((s) => !/[:#\n\r{}[\],&*!|>'"%@`]/.test(s)),
                  fc.constantFrom('admin', 'reader', 'root', '[service, agent]', '{role: agent}', ''),
                ),
                { maxLength: 4 },
              )
              .map((lines) => lines.map(([t, r]) => `${t}: ${r}`).join('\n')),
          ),
          (text) => {
            try {
              for (const t of parseStaticTokens(text)) {
                expect(t.token.length).toBeGreaterThanOrEqual(16);
                expect(t.roles.length).toBeGreaterThan(0);
              }
            } catch (err) {
              if (!(err instanceof ConfigError)) throw err;
            }
          },
        ),
        { numRuns: propertyRuns(3_000) },
      );
    },
    Math.max(30_000, propertyRuns(3_000) * 5),
  );
});
