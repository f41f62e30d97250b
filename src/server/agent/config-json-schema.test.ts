/**
 * schema/agent-config.schema.json is what the zod schemas emit (run `npm run gen`
 * after changing them), and an editor checking agent.yaml with it agrees with the
 * agent on the configurations Berth itself writes and on plain mistakes.
 */
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import { demoHostDefinition } from '../../sim/host.js';
import { driverKey, parseAgentConfig } from './config.js';
import { agentConfigJsonSchema } from './config-json-schema.js';
import { BUILTIN_DRIVERS, loadDriver } from './driver-registry.js';

/** What the agent checks at start: the file, then each built-in driver's section (its constructor). */
async function agentAccepts(doc: unknown): Promise<true> {
  const config = parseAgentConfig(structuredClone(doc), {}, '/base');
  for (const entry of config.enabledDrivers.filter((e) => Object.hasOwn(BUILTIN_DRIVERS, e))) {
    await loadDriver(entry, config.driverSections[driverKey(entry)] ?? {}, '/base');
  }
  return true;
}

const FILE = new URL('../../../schema/agent-config.schema.json', import.meta.url);

describe('schema/agent-config.schema.json', () => {
  const schema = agentConfigJsonSchema();
  const validate = new Ajv2020({ strict: true, allErrors: true }).compile(schema);

  it('is the schema the zod schemas emit (npm run gen writes it)', () => {
    expect(JSON.parse(readFileSync(FILE, 'utf8'))).toEqual(schema);
  });

  const simConfig = {
    host: 'h',
    sysfs_root: '/x/sys',
    enabled_drivers: ['pci', 'nvme'],
    discovery_interval: 5,
    auth: { mode: 'none' },
    pci: { device_spec: demoHostDefinition('h').pciDeviceSpec },
    nvme: {
      device_spec: demoHostDefinition('h').nvmeDeviceSpec,
      nvme_cli: '/x/nvme',
      cleanup_timeout: 120,
      poll_interval: 0.2,
    },
  };
  const designExample = {
    host: 'compute-1',
    listen: '127.0.0.1:7071',
    scheduler: '127.0.0.1:7070',
    enabled_drivers: ['pci', 'nvme', './acme-driver.js'],
    pci: { device_spec: [{ vendor_id: '10de', product_id: '25b6', managed: false }] },
    nvme: {
      device_spec: [{ vendor_id: '144d', clear_action: 'sanitize' }],
      cleanup_timeout: 900,
      nvme_cli: 'nvme',
    },
    tls: { cert: 'a.pem', key: 'a.key' },
    'acme-driver': { anything: 1 },
  };

  it.each([
    ['a simulated host', simConfig],
    ["DESIGN.md's example, with an external driver's section", designExample],
    ['an empty file', {}],
  ])('accepts %s, as the agent does', async (_, doc) => {
    expect(validate(doc), JSON.stringify(validate.errors)).toBe(true);
    await expect(agentAccepts(doc)).resolves.toBe(true);
  });

  it.each([
    ['a misspelt key in a section', { nvme: { cleanup_timout: 5 } }],
    ['a duration past its range', { register_interval: 1e12 }],
    ['a poll interval of a nanosecond', { nvme: { poll_interval: 1e-9 } }],
    ['an unknown clear_action', { nvme: { device_spec: [{ clear_action: 'wipe' }] } }],
    ['a misspelt device_spec key', { pci: { device_spec: [{ vendor: '8086' }] } }],
    ['an unknown auth key', { auth: { mode: 'token', password: 'x' } }],
    [
      'an address regex longer than 256 characters',
      { pci: { device_spec: [{ address: { bus: 'a'.repeat(257) } }] } },
    ],
  ])('refuses %s, as the agent does', async (_, doc) => {
    expect(validate(doc)).toBe(false);
    const enabled = 'nvme' in doc ? { enabled_drivers: ['pci', 'nvme'] } : {};
    await expect(agentAccepts({ ...enabled, ...doc })).rejects.toThrow(ConfigError);
  });
});
