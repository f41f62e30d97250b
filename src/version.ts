import { readFileSync } from 'node:fs';
import { repoPath } from './repo-path.js';

/** Berth's version, from package.json (one source of truth). */
export const BERTH_VERSION: string = (
  JSON.parse(readFileSync(repoPath('package.json'), 'utf8')) as { version: string }
).version;
