/**
 * A client in another language: Python stubs generated from proto/ with
 * Debian's protoc and grpc_python_plugin (see pythonGrpc() in
 * test/helpers/prerequisites.ts for every piece it needs) drive bind → delete →
 * cleanup against berth up, on python3-grpcio. Skipped with a message when a
 * piece is missing.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startUp, type Up } from '../../src/client/up/berth-up.js';
import { tempDir } from '../helpers/agent.js';
import { available, GRPC_PYTHON_PLUGIN as PLUGIN, PYTHON, pythonGrpc } from '../helpers/prerequisites.js';

const run = promisify(execFile);

describe.skipIf(!available(pythonGrpc(), 'the Python client test'))(
  'a Python client generated from proto/',
  () => {
    let up: Up;
    let dir: Awaited<ReturnType<typeof tempDir>>;
    let gen: string;

    beforeAll(async () => {
      dir = await tempDir('berth-python-');
      gen = join(dir.path, 'gen');
      const protos = [
        'berth/agent/v1/agent.proto',
        'berth/agent/v1/cleanup_proof.proto',
        'berth/agent/v1/device.proto',
        'berth/scheduler/v1/accelerator_request.proto',
        'berth/scheduler/v1/device.proto',
        'berth/scheduler/v1/device_service.proto',
        'berth/scheduler/v1/profile.proto',
      ];
      await run('mkdir', ['-p', gen]);
      await run(
        'protoc',
        [
          `-I${join(process.cwd(), 'proto')}`,
          `--python_out=${gen}`,
          `--grpc_out=${gen}`,
          `--plugin=protoc-gen-grpc=${PLUGIN}`,
          ...protos,
        ],
        { timeout: 60_000 },
      );
      up = await startUp({ listen: '127.0.0.1:0', stateDir: join(dir.path, 'up') });
    }, 90_000);
    afterAll(async () => {
      await up?.stop();
      await dir?.cleanup();
    });

    it('binds, deletes, follows the cleanup stream and sees the device clean again (twice: it can be re-run)', async () => {
      const example = () =>
        run(
          PYTHON,
          [
            join(process.cwd(), 'test/e2e/python/lifecycle.py'),
            gen,
            up.endpoint,
            'sim-host-1',
            up.adminToken,
          ],
          { timeout: 90_000 },
        );
      await example();
      // The same example again against the same scheduler: its names and request id are its own.
      const { stdout } = await example();
      const out = JSON.parse(stdout) as {
        cleanup_action: string;
        managed: boolean;
        final_state: string;
        reserved: number;
        phases: string[];
        not_found: string | null;
        proof_method: string;
        proof_bytes_total: number;
      };
      expect(out.cleanup_action).toBe('sanitize-block');
      expect(out.managed).toBe(true);
      expect(out.phases.at(-1)).toBe('CLEANUP_PHASE_SUCCEEDED');
      expect(out.phases).toContain('CLEANUP_PHASE_SANITIZING');
      expect(out.final_state).toBe('DEVICE_STATE_AVAILABLE');
      expect(out.reserved).toBe(0);
      expect(out.not_found).toBe('NOT_FOUND');
      // The proof of the cleanup, read by a client in another language.
      expect(out.proof_method).toBe('sanitize');
      expect(out.proof_bytes_total).toBe(16 * 1024 * 1024);
    }, 200_000);
  },
);
