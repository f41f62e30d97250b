/**
 * Every `buf curl` example in docs/api.md runs, in order, against a real
 * `berth up` (scheduler + two simulated hosts) — so the API guide stays true.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startUp, type Up } from '../../src/client/up/berth-up.js';
import { tempDir } from '../helpers/agent.js';

const run = promisify(execFile);

/** The ```sh blocks of the page, except the one that sets up the reader's shell. */
async function docBlocks(): Promise<string[]> {
  const md = await readFile(join(process.cwd(), 'docs/api.md'), 'utf8');
  return [...md.matchAll(/```sh\n([\s\S]*?)```/g)]
    .map((m) => m[1]!)
    .filter((b) => !b.includes('alias bcurl'));
}

describe('docs/api.md examples', () => {
  let up: Up;
  let dir: Awaited<ReturnType<typeof tempDir>>;

  beforeAll(async () => {
    dir = await tempDir('berth-api-docs-');
    up = await startUp({ listen: '127.0.0.1:0', stateDir: dir.path });
  }, 60_000);
  afterAll(async () => {
    await up?.stop();
    await dir?.cleanup();
  });

  it('every block runs and exits 0', async () => {
    const blocks = await docBlocks();
    expect(blocks.length).toBeGreaterThanOrEqual(8);
    const prelude = [
      'set -eo pipefail',
      `export ENDPOINT=${up.endpoint}`,
      `export BERTH_TOKEN=${up.adminToken}`,
      'bcurl() { buf curl --protocol grpc --http2-prior-knowledge -H "authorization: Bearer $BERTH_TOKEN" "$@"; }',
    ].join('\n');
    let env = '';
    for (const [i, block] of blocks.entries()) {
      // Variables a block sets (ARQ=…, MIG=…) are carried to the next ones.
      const script = `${prelude}\n${env}\n${block}\ndeclare -p | grep -E '^declare -x? ?-?-? (ARQ|ARQ2|MIG|AGENT)=' || true`;
      const res = await run('bash', ['-c', script], {
        env: { ...process.env, PATH: `${join(process.cwd(), 'node_modules/.bin')}:${process.env.PATH}` },
        timeout: 60_000,
      }).catch((err: { stdout?: string; stderr?: string; message: string }) => {
        throw new Error(
          `docs/api.md block ${i + 1} failed:\n${block}\n--- stderr:\n${err.stderr ?? err.message}`,
        );
      });
      env += `\n${res.stdout
        .split('\n')
        .filter((l) => /^declare -/.test(l))
        .join('\n')}`;
    }
  }, 180_000);
});
