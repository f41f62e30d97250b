/** Writes schema/agent-config.schema.json from the zod schemas (`npm run gen`). */
import { writeFileSync } from 'node:fs';
import { agentConfigJsonSchema } from '../src/server/agent/config-json-schema.js';

const out = new URL('../schema/agent-config.schema.json', import.meta.url);
writeFileSync(out, `${JSON.stringify(agentConfigJsonSchema(), null, 2)}\n`);
