/**
 * Every `buf curl` example in docs/api.md runs, in order, against a real
 * `berth up` (scheduler + two simulated hosts) — so the API guide stays true.
 * The page runs as a reader runs it: its first block finds the endpoint and
 * token in the client configuration ($BERTH_CONFIG; the scheduler is on a
 * random port, not 7070, and HOME is empty), and the whole page runs twice
 * against the same `berth up`, as a reader trying it again would.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeClientConfig } from '../../src/client/client-config.js';
import { startUp, type Up } from '../../src/client/up/berth-up.js';
import { tempDir } from '../helpers/agent.js';

const run = promisify(execFile);

/** The ```sh blocks of the page, in order. */
async function docBlocks(): Promise<string[]> {
  const md = await readFile(join(process.cwd(), 'docs/api.md'), 'utf8');
  return [...md.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

/** What one block leaves for the next: the page's variables and its bcurl function. */
const CARRIED = ['CONFIG', 'ENDPOINT', 'BERTH_TOKEN', 'PATH', 'RUN', 'WORK', 'ARQ', 'ARQ2', 'MIG', 'AGENT'];

describe('docs/api.md examples', () => {
  let up: Up;
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    dir = await tempDir('berth-api-docs-');
    up = await startUp({ listen: '127.0.0.1:0', stateDir: join(dir.path, 'state') });
    const config = join(dir.path, 'client-config.yaml');
    await writeClientConfig({ endpoint: up.endpoint, token: up.adminToken, state_dir: up.stateDir }, config);
    // mktemp makes the page's WORK directory under the test's own temporary directory.
    await mkdir(join(dir.path, 'tmp'));
    env = {
      ...process.env,
      BERTH_CONFIG: config,
      HOME: join(dir.path, 'home'),
      TMPDIR: join(dir.path, 'tmp'),
    };
    delete env.BERTH_TOKEN;
    delete env.BERTH_ENDPOINT;
    delete env.XDG_CONFIG_HOME;
  }, 60_000);
  afterAll(async () => {
    await up?.stop();
    await dir?.cleanup();
  });

  it('writes no fixed path: its scratch files go to a directory of its own', async () => {
    const blocks = await docBlocks();
    expect(blocks.join('\n')).not.toMatch(/\/tmp\//);
    expect(blocks[0]).toMatch(/^WORK=\$\(mktemp -d /m);
  });

  const runPage = async (pass: number) => {
    const blocks = await docBlocks();
    expect(blocks.length).toBeGreaterThanOrEqual(9);
    expect(blocks[0]).toContain('BERTH_CONFIG');
    let state = '';
    for (const [i, block] of blocks.entries()) {
      const script = [
        'set -eo pipefail',
        state,
        block,
        `declare -p ${CARRIED.join(' ')} 2>/dev/null || true`,
        'declare -f bcurl || true',
      ].join('\n');
      const res = await run('bash', ['-c', script], { env, timeout: 90_000, cwd: process.cwd() }).catch(
        (err: { stdout?: string; stderr?: string; message: string }) => {
          throw new Error(
            `docs/api.md block ${i + 1} failed (run ${pass}):\n${block}\n--- stderr:\n${err.stderr ?? err.message}`,
          );
        },
      );
      // Variables and the function a block defined are carried to the next ones.
      const lines = res.stdout.split('\n');
      const from = lines.findIndex((l) => /^declare -[-x]* (\w+)=/.test(l) || /^bcurl \(\)/.test(l));
      state = from < 0 ? state : lines.slice(from).join('\n');
    }
    return state;
  };

  it('every block runs and exits 0, twice against the same berth up', async () => {
    const first = await runPage(1);
    expect(first).toContain(`ENDPOINT="${up.endpoint}"`);
    const second = await runPage(2);
    const runId = (s: string) => /RUN="([^"]+)"/.exec(s)?.[1];
    expect(runId(second)).not.toBe(runId(first));
    // Each run kept its files in its own WORK, under TMPDIR.
    const work = (s: string) => /WORK="([^"]+)"/.exec(s)?.[1];
    expect(work(first)).toMatch(new RegExp(`^${join(dir.path, 'tmp')}/berth-api-doc\\.`));
    expect(work(second)).not.toBe(work(first));
    expect(existsSync(join(work(first)!, 'clean.err'))).toBe(true);
  }, 400_000);

  it('its refusal example fails when the reason is not the one it names', async () => {
    const blocks = await docBlocks();
    const refusal = blocks.find((b) => b.includes('berth-error-reason: DEVICE_ALREADY_CLEAN'));
    expect(refusal).toBeDefined();
    // The same check against another reason must fail the block (set -e): the example asserts something.
    const wrong = refusal!.replace(
      'berth-error-reason: DEVICE_ALREADY_CLEAN',
      'berth-error-reason: DEVICE_ALLOCATED',
    );
    expect(wrong).not.toBe(refusal);
    const script = ['set -eo pipefail', blocks[0], wrong].join('\n');
    const outcome = await run('bash', ['-c', script], { env, timeout: 60_000, cwd: process.cwd() }).then(
      () => 'passed',
      () => 'failed',
    );
    expect(outcome).toBe('failed');
  }, 120_000);
});
