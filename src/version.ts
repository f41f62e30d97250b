import { readFileSync } from 'node:fs';

/**
 * Berth's version, from package.json (one source of truth). The file is found
 * relative to this module: src/version.ts in a checkout and dist/version.js in
 * the package both sit one level below it.
 */
export const BERTH_VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
