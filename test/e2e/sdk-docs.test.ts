/**
 * docs/sdk.md's example, as a user runs it: saved into a project that depends
 * on Berth (a link to this checkout, built as the package ships it), run with
 * tsx against a real `berth up` whose client configuration it reads, and
 * type-checked with tsc (strict) against the package's declarations — so the
 * page stays true and plain objects stay accepted by the types.
 */
import { execFile } from 'node:child_process';
import { mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeClientConfig } from '../../src/client/client-config.js';
import { startUp, type Up } from '../../src/client/up/berth-up.js';
import { tempDir } from '../helpers/agent.js';

const run = promisify(execFile);
const REPO = process.cwd();

describe('docs/sdk.md', () => {
  let up: Up;
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let project: string;
  let env: NodeJS.ProcessEnv;
  let expected: string[];

  beforeAll(async () => {
    dir = await tempDir('berth-sdk-doc-');
    const md = await readFile(join(REPO, 'docs/sdk.md'), 'utf8');
    const example = [...md.matchAll(/```ts\n([\s\S]*?)```/g)]
      .map((m) => m[1]!)
      .find((b) => b.includes('fromClientConfig'));
    expect(example).toBeDefined();
    expected = /```text\n([\s\S]*?)```/.exec(md)![1]!.trimEnd().split('\n');
    await run(join(REPO, 'scripts/build.sh'), ['--if-stale'], { cwd: REPO, timeout: 180_000 });
    project = join(dir.path, 'project');
    await mkdir(join(project, 'node_modules'), { recursive: true });
    await symlink(REPO, join(project, 'node_modules', 'berth'));
    await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'sdk-doc', type: 'module' }));
    await writeFile(join(project, 'example.ts'), example!);
    await writeFile(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          types: ['node'],
          typeRoots: [join(REPO, 'node_modules/@types')],
        },
        files: ['example.ts'],
      }),
    );
    up = await startUp({ listen: '127.0.0.1:0', stateDir: join(dir.path, 'state') });
    const config = join(dir.path, 'client.yaml');
    await writeClientConfig({ endpoint: up.endpoint, token: up.adminToken, state_dir: up.stateDir }, config);
    env = { ...process.env, BERTH_CONFIG: config };
    delete env.BERTH_ENDPOINT;
    delete env.BERTH_TOKEN;
  }, 240_000);
  afterAll(async () => {
    await up?.stop();
    await dir?.cleanup();
  });

  it('type-checks against the package (plain objects included)', async () => {
    const tsc = await run(join(REPO, 'node_modules/.bin/tsc'), ['-p', project], { cwd: project }).catch(
      (e: { stdout: string; stderr: string }) => e,
    );
    expect('code' in tsc ? `${tsc.stdout}${tsc.stderr}` : '').toBe('');
  }, 120_000);

  it('runs against berth up and prints what the page says it prints', async () => {
    const { stdout, stderr } = await run(join(REPO, 'node_modules/.bin/tsx'), ['example.ts'], {
      cwd: project,
      env,
      timeout: 120_000,
    });
    expect(stderr).toBe('');
    const lines = stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(expected.length);
    for (const [i, want] of expected.entries()) {
      // The page shows `…` where a run prints its own value (a revision, which VF it got).
      const pattern = new RegExp(`^${want.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&').replaceAll('…', '\\S+')}$`);
      expect(lines[i]).toMatch(pattern);
    }
  }, 180_000);
});
