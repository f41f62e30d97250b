import { readFileSync } from 'node:fs';

/** Berth's version, from package.json (one source of truth). */
export const BERTH_VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
