/**
 * The layering rules of .dependency-cruiser.cjs catch what they are written
 * for: in a copy of the tree, one forbidden import is planted per rule (type-only
 * and transitive ones among them) and dependency-cruiser, run exactly as
 * `npm run check:deps` runs it, must report each under its rule; an allowed
 * import planted beside them must not be reported. A rule added to the
 * configuration without a planted case here fails the last test.
 */
import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const REPO = join(import.meta.dirname, '../..');
const CONFIG = '.dependency-cruiser.cjs';

interface Plant {
  rule: string;
  /** Files written into the copy: path → contents. */
  files: Record<string, string>;
  /** The violation expected: from (a planted module) → to. */
  from: string;
  to: string | RegExp;
}

const PLANTS: Plant[] = [
  {
    rule: 'pure-no-transport',
    // Type-only: erased at compile time, still a dependency on the wire format.
    files: {
      'src/server/scheduler/domain/planted-type-only.ts':
        "import type { ServiceError } from '@grpc/grpc-js';\nexport type Planted = ServiceError;\n",
    },
    from: 'src/server/scheduler/domain/planted-type-only.ts',
    to: /(^|\/)node_modules\/@grpc\/grpc-js\//,
  },
  {
    rule: 'pure-no-transport',
    // Transitive: the domain module imports a neutral-looking module that imports generated code.
    files: {
      'src/server/scheduler/domain/planted-transitive.ts':
        "import { plantedState } from '../../../planted-neutral.js';\nexport const planted = plantedState;\n",
      'src/planted-neutral.ts':
        "import { DeviceState } from './gen/berth/scheduler/v1/device.js';\nexport const plantedState = DeviceState.DEVICE_STATE_AVAILABLE;\n",
    },
    from: 'src/server/scheduler/domain/planted-transitive.ts',
    to: 'src/gen/berth/scheduler/v1/device.ts',
  },
  {
    rule: 'pure-no-storage',
    files: {
      'src/plugins/planted-storage.ts':
        "import Database from 'better-sqlite3';\nexport const planted = Database;\n",
    },
    from: 'src/plugins/planted-storage.ts',
    to: /(^|\/)node_modules\/better-sqlite3\//,
  },
  {
    rule: 'usecases-no-transport',
    files: {
      'src/server/scheduler/usecases/planted.ts':
        "import { toServiceError } from '../../grpc/status.js';\nexport const planted = toServiceError;\n",
    },
    from: 'src/server/scheduler/usecases/planted.ts',
    to: 'src/server/grpc/status.ts',
  },
  {
    rule: 'core-no-storage-driver',
    files: { 'src/server/scheduler/app/planted-pg.ts': "import pg from 'pg';\nexport const planted = pg;\n" },
    from: 'src/server/scheduler/app/planted-pg.ts',
    to: /(^|\/)node_modules\/pg\//,
  },
  {
    rule: 'app-no-services',
    files: {
      'src/server/scheduler/app/planted-service-user.ts':
        "import * as service from '../services/profile-service.js';\nexport const planted = service;\n",
    },
    from: 'src/server/scheduler/app/planted-service-user.ts',
    to: 'src/server/scheduler/services/profile-service.ts',
  },
  {
    rule: 'store-only-the-port',
    files: {
      'src/server/scheduler/store/planted.ts':
        "import * as devices from '../usecases/devices.js';\nexport const planted = devices;\n",
    },
    from: 'src/server/scheduler/store/planted.ts',
    to: 'src/server/scheduler/usecases/devices.ts',
  },
  {
    rule: 'store-only-the-port',
    // A backend composing the use cases over itself: the composition root's (scheduler/stores.ts).
    files: {
      'src/server/scheduler/store/planted-composition.ts':
        "import { useCasesOver } from '../usecases/use-cases.js';\nexport const planted = useCasesOver;\n",
    },
    from: 'src/server/scheduler/store/planted-composition.ts',
    to: 'src/server/scheduler/usecases/use-cases.ts',
  },
  {
    rule: 'usecases-no-store',
    // Transitive: through a neutral-looking module of the use cases.
    files: {
      'src/server/scheduler/usecases/planted-backend-user.ts':
        "import { planted as p } from './planted-neutral.js';\nexport const planted = p;\n",
      'src/server/scheduler/usecases/planted-neutral.ts':
        "import { SQLITE } from '../store/sql/dialect.js';\nexport const planted = SQLITE;\n",
    },
    from: 'src/server/scheduler/usecases/planted-backend-user.ts',
    to: 'src/server/scheduler/store/sql/dialect.ts',
  },
  {
    rule: 'app-no-transport',
    files: {
      'src/server/scheduler/app/planted-grpc.ts':
        "import type { ServiceError } from '@grpc/grpc-js';\nexport type Planted = ServiceError;\n",
    },
    from: 'src/server/scheduler/app/planted-grpc.ts',
    to: /(^|\/)node_modules\/@grpc\/grpc-js\//,
  },
  {
    rule: 'app-no-transport',
    // Transitive: a workflow imports a runtime helper that imports the generated code (decision 55).
    files: {
      'src/server/scheduler/app/planted-through-runtime.ts':
        "import { plantedDevice } from '../runtime/planted-helper.js';\nexport const planted = plantedDevice;\n",
      'src/server/scheduler/runtime/planted-helper.ts':
        "import { Device } from '../../../gen/berth/scheduler/v1/device.js';\nexport const plantedDevice = Device;\n",
    },
    from: 'src/server/scheduler/app/planted-through-runtime.ts',
    to: 'src/gen/berth/scheduler/v1/device.ts',
  },
  {
    rule: 'use-cases-through-their-api',
    // A service reaching into a use-case module instead of the API.
    files: {
      'src/server/scheduler/services/planted-use-case-internal.ts':
        "import * as devices from '../usecases/devices.js';\nexport const planted = devices;\n",
    },
    from: 'src/server/scheduler/services/planted-use-case-internal.ts',
    to: 'src/server/scheduler/usecases/devices.ts',
  },
  {
    rule: 'services-no-other-service',
    files: {
      'src/server/scheduler/services/planted-service.ts':
        "import * as service from './profile-service.js';\nexport const planted = service;\n",
    },
    from: 'src/server/scheduler/services/planted-service.ts',
    to: 'src/server/scheduler/services/profile-service.ts',
  },
  {
    rule: 'plugins-no-host-side',
    files: {
      'src/plugins/nvme/planted.ts':
        "import { buildSimHost } from '../../sim/host.js';\nexport const planted = buildSimHost;\n",
    },
    from: 'src/plugins/nvme/planted.ts',
    to: 'src/sim/host.ts',
  },
  {
    rule: 'public-api-no-server',
    // Appended to the copy of the SDK (see plant()).
    files: { 'src/client/sdk.ts': "\nimport '../server/listen-address.js';\n" },
    from: 'src/client/sdk.ts',
    to: 'src/server/listen-address.ts',
  },
  {
    rule: 'server-no-client',
    files: {
      'src/server/agent/planted.ts':
        "import { DEFAULT_ENDPOINT } from '../../client/client-config.js';\nexport const planted = DEFAULT_ENDPOINT;\n",
    },
    from: 'src/server/agent/planted.ts',
    to: 'src/client/client-config.ts',
  },
  {
    rule: 'no-circular',
    // One side imports only a type: a cycle all the same.
    files: {
      'src/planted-a.ts': "import type { B } from './planted-b.js';\nexport interface A { b?: B }\n",
      'src/planted-b.ts': "import type { A } from './planted-a.js';\nexport interface B { a?: A }\n",
    },
    from: 'src/planted-a.ts',
    to: 'src/planted-b.ts',
  },
  {
    rule: 'generated-is-standalone',
    files: {
      'src/gen/planted.ts':
        "import { BerthError } from '../errors.js';\nexport const planted = BerthError;\n",
    },
    from: 'src/gen/planted.ts',
    to: 'src/errors.ts',
  },
  {
    rule: 'production-no-test-code',
    files: {
      'src/sim/planted-fixture.ts':
        "import { makeFunction } from '../plugins/device-spec/fixtures.support.js';\nexport const planted = makeFunction;\n",
    },
    from: 'src/sim/planted-fixture.ts',
    to: 'src/plugins/device-spec/fixtures.support.ts',
  },
  {
    rule: 'production-no-dev-dependency',
    files: { 'src/sim/planted-dev.ts': "import fc from 'fast-check';\nexport const planted = fc;\n" },
    from: 'src/sim/planted-dev.ts',
    to: /(^|\/)node_modules\/fast-check\//,
  },
  {
    rule: 'not-to-unresolvable',
    files: { 'src/planted-typo.ts': "import { x } from './no-such-module.js';\nexport const planted = x;\n" },
    from: 'src/planted-typo.ts',
    to: './no-such-module.js',
  },
];

/** Allowed imports, planted beside the forbidden ones: none of these may be reported. */
const ALLOWED: Record<string, string> = {
  'src/server/scheduler/domain/planted-allowed.ts':
    "import { BerthError } from '../../../errors.js';\nimport type { Profile } from './profile.js';\nexport type Planted = Profile | BerthError;\n",
  'src/server/agent/planted-allowed.ts':
    "import { CHANNEL_OPTIONS } from '../../transport/channel.js';\nexport const planted = CHANNEL_OPTIONS;\n",
  'src/server/scheduler/store/planted-allowed-port.ts':
    "import { FOR_UPDATE } from '../usecases/unit-of-work.js';\nexport const planted = FOR_UPDATE;\n",
  'src/server/scheduler/services/planted-allowed-api.ts':
    "import type { UseCases } from '../usecases/use-cases.js';\nexport type Planted = UseCases;\n",
  'src/server/scheduler/services/planted-allowed-service.ts':
    "import { BerthError } from '../../../errors.js';\nexport const planted = BerthError;\n",
};

interface Violation {
  from: string;
  to: string;
  rule: { name: string };
  cycle?: { name: string }[];
  via?: { name: string }[];
}

describe('dependency rules (.dependency-cruiser.cjs)', () => {
  let copy: string;
  let violations: Violation[];

  beforeAll(async () => {
    copy = await mkdtemp(join(tmpdir(), 'berth-depcruise-'));
    await cp(join(REPO, 'src'), join(copy, 'src'), { recursive: true });
    for (const f of [CONFIG, 'tsconfig.json', 'package.json']) await cp(join(REPO, f), join(copy, f));
    await symlink(join(REPO, 'node_modules'), join(copy, 'node_modules'));
    const planted = [...PLANTS.flatMap((p) => Object.entries(p.files)), ...Object.entries(ALLOWED)];
    for (const [path, text] of planted) {
      const file = join(copy, path);
      await mkdir(dirname(file), { recursive: true });
      // The SDK is the one existing module a case appends to; every other plant is a new file.
      const before = path === 'src/client/sdk.ts' ? await readFile(file, 'utf8') : '';
      await writeFile(file, before + text);
    }
    // Run as check:deps runs it (the configuration, its resolver options), over the planted modules.
    const depcruise = join(REPO, 'node_modules/.bin/depcruise');
    const roots = [...new Set(planted.map(([path]) => path))];
    const { stdout } = await promisify(execFile)(
      depcruise,
      ['--config', CONFIG, '--output-type', 'json', ...roots],
      { cwd: copy, maxBuffer: 256 * 1024 * 1024 },
    ).catch((e: { stdout?: string; stderr?: string }) => {
      // depcruise exits non-zero when it reports error-level violations: expected here.
      if (e.stdout) return { stdout: e.stdout };
      throw new Error(`depcruise failed: ${e.stderr}`);
    });
    violations = (JSON.parse(stdout) as { summary: { violations: Violation[] } }).summary.violations;
  }, 120_000);

  afterAll(async () => {
    if (copy) await rm(copy, { recursive: true, force: true });
  });

  const reported = (p: Plant) =>
    violations.filter(
      (v) =>
        v.rule.name === p.rule &&
        v.from === p.from &&
        (typeof p.to === 'string' ? v.to === p.to : p.to.test(v.to)),
    );

  for (const p of PLANTS) {
    it(`${p.rule} reports ${p.from} -> ${p.to}`, () => {
      const mine = violations.filter((v) => v.from === p.from || v.to === p.from);
      expect(reported(p), JSON.stringify(mine, null, 1)).not.toEqual([]);
    });
  }

  it('reports the transitive cases through the module in between', () => {
    const [v] = reported(PLANTS[1]!);
    expect(v?.via?.map((m) => m.name)).toContain('src/planted-neutral.ts');
    const [app] = reported(PLANTS.find((p) => p.from.endsWith('planted-through-runtime.ts'))!);
    expect(app?.via?.map((m) => m.name)).toContain('src/server/scheduler/runtime/planted-helper.ts');
  });

  it('reports nothing about the allowed imports', () => {
    const allowed = Object.keys(ALLOWED);
    expect(violations.filter((v) => allowed.includes(v.from))).toEqual([]);
  });

  it('has a planted case for every rule of the configuration', async () => {
    const config = createRequire(import.meta.url)(join(REPO, CONFIG)) as { forbidden: { name: string }[] };
    const rules = config.forbidden.map((r) => r.name).sort();
    expect([...new Set(PLANTS.map((p) => p.rule))].sort()).toEqual(rules);
  });
});
