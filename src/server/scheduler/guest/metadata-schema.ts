/**
 * The device-role metadata document's JSON Schema (schema/device-metadata.schema.json:
 * the spec's schema, corrected, plus Berth's passthrough type) and a validator
 * for it. The schema file is the contract guests and tools read; the scheduler
 * checks every document it serves against the same file, so the two cannot drift.
 */

import { readFileSync } from 'node:fs';
import { Ajv, type ErrorObject } from 'ajv';

/**
 * schema/ at the root of the checkout and of the package, four levels above
 * this module in both (src/… and dist/… mirror each other).
 */
export const METADATA_SCHEMA_URL = new URL('../../../../schema/device-metadata.schema.json', import.meta.url);

/** The parsed schema document. */
export const metadataSchema: Record<string, unknown> = JSON.parse(readFileSync(METADATA_SCHEMA_URL, 'utf8'));

// strict: unknown keywords in the schema are errors, so a typo in the file fails at load, not silently.
const ajv = new Ajv({ allErrors: true, strict: true });
const validate = ajv.compile(metadataSchema);

const describe = (e: ErrorObject): string => `${e.instancePath || '/'} ${e.message ?? e.keyword}`;

/** Validate a metadata document; errors are `<json pointer> <message>` strings. */
export function validateMetadata(doc: unknown): { valid: boolean; errors: string[] } {
  const valid = validate(doc);
  return { valid, errors: valid ? [] : (validate.errors ?? []).map(describe) };
}
