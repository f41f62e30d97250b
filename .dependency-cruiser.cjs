/**
 * Berth's layering (DESIGN.md "Layout", notes/style.md "Thin transport, pure
 * domain"), checked on the whole import graph by `npm run check:deps`:
 * every import, static or dynamic, value or type-only (`import type` counts:
 * a domain type that names a generated message couples the domain to the
 * wire just as much), followed transitively where a rule says `reachable`.
 *
 * A rule that cannot see an import enforces nothing, so the graph must be
 * whole: `not-to-unresolvable` fails on any import the resolver cannot place.
 * test/architecture/dependency-rules.test.ts plants a forbidden import for
 * every rule in a copy of the tree and checks that the rule reports it.
 *
 * There is no list of known violations: every import obeys every rule.
 */

/** Tests and test support: they may import anything, but nothing in production imports them. */
const TEST = '(\\.test\\.ts$|\\.support\\.ts$|\\.soak\\.ts$|^test/)';

/** Transport: grpc-js and its companions, the generated messages and stubs, the gRPC server plumbing. */
const TRANSPORT = [
  '(^|/)node_modules/@grpc/',
  '(^|/)node_modules/grpc-health-check/',
  '^src/gen/',
  '^src/server/grpc/',
  '^src/transport/',
  '^src/client/',
];

/** Storage: the database drivers and the scheduler's store (port and adapters). */
const STORAGE_DRIVERS = [
  '(^|/)node_modules/better-sqlite3/',
  '(^|/)node_modules/pg/',
  '(^|/)node_modules/pg-pool/',
];
const STORAGE = [...STORAGE_DRIVERS, '^src/server/scheduler/store/'];

/**
 * Pure modules: the scheduler's domain (state machine, allocation, profiles,
 * media), guest rendering, the error taxonomy, the parsed identifiers, and the driver side (the
 * driver contract, device specifications, cleanup evidence and policy).
 */
const PURE = [
  '^src/server/scheduler/domain/',
  '^src/server/scheduler/guest/',
  '^src/errors\\.ts$',
  '^src/identifiers\\.ts$',
  '^src/plugins/',
];

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'not-to-unresolvable',
      comment:
        'Every import resolves: an import the resolver cannot place is invisible to every other rule ' +
        '(test/fixtures/vendor-driver-package imports `berth/driver`, which exists only once the package is installed).',
      severity: 'error',
      from: { pathNot: '^test/fixtures/vendor-driver-package/' },
      to: { couldNotResolve: true },
    },
    {
      name: 'no-circular',
      comment:
        'No import cycles, type-only imports included: a cycle means neither side can be understood, tested ' +
        'or moved without the other.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'pure-no-transport',
      comment:
        'Domain code never reaches transport, directly or through another module: the domain, guest rendering, ' +
        'the error taxonomy and the drivers are used by every transport and tested without one (style.md 1).',
      severity: 'error',
      from: { path: PURE, pathNot: TEST },
      to: { path: TRANSPORT, reachable: true },
    },
    {
      name: 'pure-no-storage',
      comment:
        'Domain code never reaches storage (a database driver or the store): decisions are made on values, ' +
        'and the store persists what the use cases decided.',
      severity: 'error',
      from: { path: PURE, pathNot: TEST },
      to: { path: STORAGE, reachable: true },
    },
    {
      name: 'usecases-no-transport',
      comment:
        'Use cases (one unit of work each) never reach generated code, gRPC, the services or the runtime: ' +
        'they are written once against the unit-of-work port and called by the services, the runtime and the ' +
        'Cyborg adapter alike.',
      severity: 'error',
      from: { path: '^src/server/scheduler/usecases/', pathNot: TEST },
      to: {
        path: [...TRANSPORT, '^src/server/scheduler/services/', '^src/server/scheduler/runtime/'],
        reachable: true,
      },
    },
    {
      name: 'core-no-storage-driver',
      comment:
        'Use cases and application workflows reach storage only through the store port: never a database ' +
        'driver, so that both backends run the same code (DESIGN.md "Persistence and recovery").',
      severity: 'error',
      from: { path: ['^src/server/scheduler/usecases/', '^src/server/scheduler/app/'], pathNot: TEST },
      to: { path: STORAGE_DRIVERS, reachable: true },
    },
    {
      name: 'app-no-services',
      comment:
        'Application workflows (app/) never reach a gRPC service: services decode, call one application ' +
        'method and encode, so the dependency only goes services -> app.',
      severity: 'error',
      from: { path: '^src/server/scheduler/app/', pathNot: TEST },
      to: { path: '^src/server/scheduler/services/', reachable: true },
    },
    {
      name: 'store-only-the-port',
      comment:
        'The store implements the unit-of-work port and knows no use case, workflow, service or runtime: ' +
        'decisions live in the use cases, once for both backends. It imports only the port (which the use ' +
        "cases own: usecases/unit-of-work.ts); composing the use cases over a backend is the root's " +
        '(scheduler/stores.ts), so no store module builds what is above it (issue 41 item 8).',
      severity: 'error',
      from: { path: '^src/server/scheduler/store/', pathNot: TEST },
      to: {
        path: [
          '^src/server/scheduler/usecases/',
          '^src/server/scheduler/app/',
          '^src/server/scheduler/services/',
          '^src/server/scheduler/runtime/',
        ],
        pathNot: '^src/server/scheduler/usecases/unit-of-work\\.ts$',
      },
    },
    {
      name: 'usecases-no-store',
      comment:
        'The use cases never reach a backend, directly or through another module: they own the port a ' +
        'backend implements, so store/ -> usecases/ is the only direction (docs/decisions.md 55).',
      severity: 'error',
      from: { path: '^src/server/scheduler/usecases/', pathNot: TEST },
      to: { path: STORAGE, reachable: true },
    },
    {
      name: 'app-no-transport',
      comment:
        'Application workflows (app/) reach no transport and no backend, directly or through any chain of ' +
        'imports (decision 55): they call the use cases and the plain-typed agent port (app/agent-port.ts), ' +
        'which the runtime implements over gRPC and the composition hands in; the services do the decoding ' +
        'and encoding.',
      severity: 'error',
      from: { path: '^src/server/scheduler/app/', pathNot: TEST },
      to: { path: [...TRANSPORT, ...STORAGE], reachable: true },
    },
    {
      name: 'use-cases-through-their-api',
      comment:
        'Everything above the use cases (services, workflows, runtime, Placement, Cyborg, the composition) ' +
        'calls them through their one API, usecases/use-cases.ts (and names the port, unit-of-work.ts): ' +
        'never a use-case module, so what a use case does inside stays its own and a rule or helper that two ' +
        'layers share lives in the domain (decision 55, issue 41 item 5).',
      severity: 'error',
      from: { path: '^src/server/scheduler/(?!usecases/|store/|domain/|guest/)', pathNot: TEST },
      to: {
        path: '^src/server/scheduler/usecases/',
        pathNot: '^src/server/scheduler/usecases/(use-cases|unit-of-work)\\.ts$',
      },
    },
    {
      name: 'services-no-other-service',
      comment:
        'A service imports no other service: a workflow two services share belongs in the application layer, ' +
        'not in whichever service was written first.',
      severity: 'error',
      from: { path: '^src/server/scheduler/services/([^/]+)-service\\.ts$' },
      to: {
        path: '^src/server/scheduler/services/[^/]+-service\\.ts$',
        pathNot: '^src/server/scheduler/services/$1-service\\.ts$',
      },
    },
    {
      name: 'plugins-no-host-side',
      comment:
        'Drivers never reach the agent, the scheduler or the simulator: a driver sees the host only through ' +
        'its context (sysfs root, command runner, logger), so the agent can judge what it reports and an ' +
        'external driver package needs nothing else (DESIGN.md "The driver contract").',
      severity: 'error',
      from: { path: '^src/plugins/', pathNot: TEST },
      to: { path: ['^src/server/', '^src/sim/', '^src/client/'], reachable: true },
    },
    {
      name: 'public-api-no-server',
      comment:
        'The SDK (package export ./sdk) and the driver API (./driver) reach no server, simulator or database ' +
        'code: an application that imports them gets a client or a contract, not a scheduler.',
      severity: 'error',
      from: { path: ['^src/client/sdk\\.ts$', '^src/plugins/driver-api\\.ts$'] },
      to: { path: ['^src/server/', '^src/sim/', ...STORAGE_DRIVERS], reachable: true },
    },
    {
      name: 'server-no-client',
      comment:
        'Server code never imports src/client (the SDK and the CLI): what both sides need, such as the ' +
        'channel options and the status decoding, lives in src/transport.',
      severity: 'error',
      from: { path: '^src/server/', pathNot: TEST },
      to: { path: '^src/client/' },
    },
    {
      name: 'generated-is-standalone',
      comment: 'Generated code (npm run gen) imports only generated code and its runtime libraries.',
      severity: 'error',
      from: { path: '^src/gen/' },
      to: { path: '^src/', pathNot: '^src/gen/' },
    },
    {
      name: 'production-no-test-code',
      comment:
        'Production code never imports tests, test support (test/, *.support.ts) or a devDependency ' +
        '(vitest, fast-check): the installed package has none of them.',
      severity: 'error',
      from: { path: '^src/', pathNot: TEST },
      to: { path: TEST },
    },
    {
      name: 'production-no-dev-dependency',
      comment:
        'Production code never imports a devDependency: `npm install --omit=dev` (the installed package) ' +
        'has none. A module that needs one is test support and is named *.support.ts.',
      severity: 'error',
      from: { path: '^src/', pathNot: TEST },
      to: { dependencyTypes: ['npm-dev'] },
    },
  ],
  options: {
    // TypeScript 7 has no JavaScript API; swc parses TypeScript for dependency-cruiser.
    parser: 'swc',
    tsConfig: { fileName: 'tsconfig.json' },
    // Type-only imports are dependencies too (see the module comment).
    tsPreCompilationDeps: true,
    doNotFollow: { path: 'node_modules' },
    // Paths inside node_modules as the project sees them, also where node_modules is a symbolic link.
    preserveSymlinks: true,
    exclude: { path: '^dist/' },
    moduleSystems: ['es6', 'cjs'],
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['types', 'import', 'require', 'node', 'default'],
      mainFields: ['types', 'module', 'main'],
      extensions: ['.ts', '.d.ts', '.js', '.cjs', '.mjs', '.json'],
    },
    reporterOptions: {
      text: { highlightFocused: true },
    },
  },
};
