/**
 * The agent configuration's JSON Schema, emitted from the zod schemas that
 * validate it (config.ts, the built-in drivers' sections, device_spec
 * entries), so an editor with a YAML language server checks agent.yaml as the
 * agent will. Written to schema/agent-config.schema.json by `npm run gen`;
 * a test keeps the file in sync with this function.
 *
 * Only what JSON Schema can say is in it (types, keys, ranges, enums); the
 * agent checks more (Nova's value semantics, which sections an enabled driver
 * takes, files that exist), with messages naming the key.
 */
import { z } from 'zod';
import { deviceSpecInputSchema } from '../../plugins/device-spec/index.js';
import { nvmeSectionSchema } from '../../plugins/nvme/config.js';
import { pciSectionSchema } from '../../plugins/pci/pci-driver.js';
import { agentConfigSchema } from './config.js';

type Json = Record<string, unknown>;

const OPTIONS = { io: 'input', unrepresentable: 'any', target: 'draft-2020-12' } as const;

function jsonOf(schema: z.ZodType): Json {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, OPTIONS) as Json;
  return rest;
}

/** A driver's section: its own schema, with device_spec's input shape (or null: an empty section). */
function driverSection(schema: z.ZodType, cleanupKeys: boolean): Json {
  const json = jsonOf(schema);
  (json.properties as Json).device_spec = jsonOf(deviceSpecInputSchema(cleanupKeys).nullable());
  return { anyOf: [json, { type: 'null' }] };
}

export function agentConfigJsonSchema(): Json {
  const top = jsonOf(agentConfigSchema);
  const properties = top.properties as Json;
  properties.enabled_drivers = {
    description: (agentConfigSchema.shape.enabled_drivers as z.ZodType).description,
    anyOf: [
      { type: 'array', items: { type: 'string', minLength: 1 }, minItems: 1 },
      { type: 'string' },
      { type: 'null' },
    ],
  };
  properties.pci = driverSection(pciSectionSchema(), false);
  properties.nvme = driverSection(nvmeSectionSchema('nvme'), true);
  properties['nvme-vendor-example'] = driverSection(nvmeSectionSchema('nvme-vendor-example'), true);
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    title: 'Berth agent configuration (agent.yaml)',
    description:
      "docs/operator-guide.md describes every key. Other top-level keys are the sections of enabled external drivers (keyed by the module file stem or the package name's last segment).",
    ...top,
    additionalProperties: { anyOf: [{ type: 'object' }, { type: 'null' }] },
  };
}
