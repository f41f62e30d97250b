/**
 * Loads driver plugins: built-in ones by name, external ones from a module path
 * (relative to the config file) or a package name. A module exports its driver
 * as its default export or as `Driver`: a definition (`defineDriver`, driver
 * API 3) whose config schema parses the section before `create` gets it — or,
 * deprecated until API 4, a class extending GenericDriver (API 2), adapted to
 * the version-3 contract and announced with one warning line (decision 82).
 *
 * A package name resolves as an `import` from Berth itself would: a package
 * installed beside a global install (`npm install -g berth @acme/berth-driver-x`)
 * or in the node_modules of a project that depends on Berth. The package
 * imports the contract from `berth/driver` and so shares this agent's modules.
 */
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ConfigError } from '../../errors.js';
import {
  DRIVER_API_VERSION,
  type Driver,
  type DriverDefinition,
  type HostContext,
  instantiateDriver,
} from '../../plugins/driver.js';
import { DRIVER_API_V2, type DriverClass, fromV2, type GenericDriver } from '../../plugins/driver-v2.js';

type ModuleLoader = () => Promise<Record<string, unknown>>;

export const BUILTIN_DRIVERS: Record<string, ModuleLoader> = {
  pci: () => import('../../plugins/pci/index.js'),
  nvme: () => import('../../plugins/nvme/index.js'),
  'nvme-vendor-example': () => import('../../plugins/nvme-vendor-example/index.js'),
};

/** A loaded driver, whichever driver API it was written for. */
export interface HostedDriver extends Driver {
  /** The driver API it was written against. */
  readonly apiVersion: string;
  /** Whether it has the cleanup capability: derived from it, never declared beside it. */
  readonly supportsCleaning: boolean;
}

export interface LoadedDriver {
  /** The enabled_drivers entry. */
  entry: string;
  /** Where it came from: 'builtin' or the resolved module specifier. */
  source: string;
  driver: HostedDriver;
}

function isPath(entry: string): boolean {
  return entry.startsWith('.') || isAbsolute(entry) || /\.(m?[jt]s|cjs)$/.test(entry);
}

async function importModule(
  entry: string,
  baseDir: string,
): Promise<{ mod: Record<string, unknown>; source: string }> {
  // Own keys only: `__proto__`, `valueOf` and friends are names like any other, not built-ins.
  const builtin = Object.hasOwn(BUILTIN_DRIVERS, entry) ? BUILTIN_DRIVERS[entry] : undefined;
  if (builtin) return { mod: await builtin(), source: 'builtin' };
  try {
    const specifier = isPath(entry)
      ? pathToFileURL(resolve(baseDir, entry)).href
      : import.meta.resolve(entry);
    return { mod: (await import(specifier)) as Record<string, unknown>, source: specifier };
  } catch (err) {
    const known = Object.keys(BUILTIN_DRIVERS).join(', ');
    throw new ConfigError(
      `enabled_drivers: cannot load driver ${JSON.stringify(entry)} (built-in drivers: ${known}; ` +
        `otherwise a module path or package name): ${(err as Error).message}`,
      { cause: err },
    );
  }
}

type Export = { kind: 'definition'; def: DriverDefinition } | { kind: 'v2'; cls: DriverClass };

/** The module's driver: a definition (API 3), or a class with discover() (API 2). */
function driverExportOf(mod: Record<string, unknown>, entry: string): Export {
  const x = (mod.default ?? mod.Driver) as unknown;
  if (
    typeof x === 'function' &&
    typeof (x as { prototype?: { discover?: unknown } }).prototype?.discover === 'function'
  ) {
    return { kind: 'v2', cls: x as DriverClass };
  }
  const d = x as Partial<DriverDefinition> | null;
  if (
    typeof d === 'object' &&
    d !== null &&
    typeof d.create === 'function' &&
    typeof d.config === 'function'
  ) {
    return { kind: 'definition', def: d as DriverDefinition };
  }
  throw new ConfigError(
    `enabled_drivers: module ${JSON.stringify(entry)} does not export a driver (default export or \`Driver\`): ` +
      'a defineDriver({apiVersion, name, config, create}) definition',
  );
}

const majorOf = (v: unknown): string => String(v ?? '').split('.')[0]!;

function refuseVersion(entry: string, version: unknown): never {
  throw new ConfigError(
    `driver ${JSON.stringify(entry)} was written for driver API version ${JSON.stringify(version)}; ` +
      `this agent speaks version ${DRIVER_API_VERSION} (and ${DRIVER_API_V2}, deprecated)`,
  );
}

/** Runs a driver's constructor or `create`: anything it throws is a ConfigError naming the entry. */
function construct<T>(entry: string, make: () => T): T {
  try {
    return make();
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`driver ${JSON.stringify(entry)}: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * Loads and constructs one driver with its config section (`key` is the
 * section's name, for messages). A driver API 2 class is adapted, with one
 * warning on `logger` naming the entry and the version.
 */
export async function loadDriver(
  entry: string,
  section: Record<string, unknown>,
  baseDir: string,
  o: { key?: string; logger?: { warn(obj: object, msg: string): void } } = {},
): Promise<LoadedDriver> {
  const { mod, source } = await importModule(entry, baseDir);
  const x = driverExportOf(mod, entry);
  let driver: HostedDriver;
  if (x.kind === 'definition') {
    if (majorOf(x.def.apiVersion) !== DRIVER_API_VERSION) refuseVersion(entry, x.def.apiVersion);
    const d = construct(entry, () => instantiateDriver(x.def, section, o.key ?? x.def.name));
    driver = hosted(d, String(x.def.apiVersion));
  } else {
    const d: GenericDriver = construct(entry, () => new x.cls({ config: section }));
    if (majorOf(d.apiVersion) !== DRIVER_API_V2) refuseVersion(entry, d.apiVersion);
    o.logger?.warn(
      { driver: d.name, entry, apiVersion: d.apiVersion },
      `driver package ${JSON.stringify(entry)} uses driver API version ${d.apiVersion}, deprecated: ` +
        `it loads until version 4; rewrite it as a defineDriver definition (API ${DRIVER_API_VERSION}, docs/drivers.md)`,
    );
    driver = hosted(fromV2(d), d.apiVersion);
  }
  if (typeof driver.name !== 'string' || driver.name === '') {
    throw new ConfigError(`driver ${JSON.stringify(entry)} has no name`);
  }
  return { entry, source, driver };
}

/**
 * The driver as the host keeps it: its members called on it (a driver may be
 * a class instance), the API version, and whether it cleans — derived from
 * the capability.
 */
function hosted(d: Driver, apiVersion: string): HostedDriver {
  if (typeof d?.discover !== 'function') {
    throw new ConfigError(`driver ${JSON.stringify(d?.name)} has no discover()`);
  }
  const { initHost, discoverAt, cleanup } = d;
  return Object.freeze({
    name: d.name,
    apiVersion,
    supportsCleaning: typeof cleanup === 'function',
    discover: (ctx: HostContext) => d.discover(ctx),
    ...(initHost ? { initHost: (ctx: HostContext) => initHost.call(d, ctx) } : {}),
    ...(discoverAt
      ? { discoverAt: (ctx: HostContext, addresses: readonly string[]) => discoverAt.call(d, ctx, addresses) }
      : {}),
    ...(typeof cleanup === 'function' ? { cleanup: (device, ctx) => cleanup.call(d, device, ctx) } : {}),
  } satisfies HostedDriver);
}
