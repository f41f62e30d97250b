/**
 * Loads driver plugins: built-in ones by name, external ones from a module path
 * (relative to the config file) or a package name. A module exports the driver
 * class as its default export or as `Driver`; the class must extend the
 * contract and declare the driver API major version this agent speaks.
 *
 * A package name resolves as an `import` from Berth itself would: a package
 * installed beside a global install (`npm install -g berth @acme/berth-driver-x`)
 * or in the node_modules of a project that depends on Berth. The package
 * imports the contract from `berth/driver` and so shares this agent's modules.
 */
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ConfigError } from '../../errors.js';
import { DRIVER_API_VERSION, type DriverClass, type GenericDriver } from '../../plugins/driver.js';

type ModuleLoader = () => Promise<Record<string, unknown>>;

export const BUILTIN_DRIVERS: Record<string, ModuleLoader> = {
  pci: () => import('../../plugins/pci/index.js'),
  nvme: () => import('../../plugins/nvme/index.js'),
  'nvme-vendor-example': () => import('../../plugins/nvme-vendor-example/index.js'),
};

export interface LoadedDriver {
  /** The enabled_drivers entry. */
  entry: string;
  /** Where it came from: 'builtin' or the resolved module specifier. */
  source: string;
  driver: GenericDriver;
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

function driverClassOf(mod: Record<string, unknown>, entry: string): DriverClass {
  const cls = (mod.default ?? mod.Driver) as unknown;
  if (
    typeof cls !== 'function' ||
    typeof (cls as { prototype?: { discover?: unknown } }).prototype?.discover !== 'function'
  ) {
    throw new ConfigError(
      `enabled_drivers: module ${JSON.stringify(entry)} does not export a driver class (default export or \`Driver\`) with discover()`,
    );
  }
  return cls as DriverClass;
}

/** Loads and constructs one driver with its config section. */
export async function loadDriver(
  entry: string,
  section: Record<string, unknown>,
  baseDir: string,
): Promise<LoadedDriver> {
  const { mod, source } = await importModule(entry, baseDir);
  const Cls = driverClassOf(mod, entry);
  let driver: GenericDriver;
  try {
    driver = new Cls({ config: section });
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`driver ${JSON.stringify(entry)}: ${(err as Error).message}`, { cause: err });
  }
  const major = String(driver.apiVersion ?? '').split('.')[0];
  if (major !== DRIVER_API_VERSION) {
    throw new ConfigError(
      `driver ${JSON.stringify(entry)} was written for driver API version ${JSON.stringify(driver.apiVersion)}; ` +
        `this agent speaks version ${DRIVER_API_VERSION}`,
    );
  }
  if (typeof driver.name !== 'string' || driver.name === '') {
    throw new ConfigError(`driver ${JSON.stringify(entry)} has no name`);
  }
  return { entry, source, driver };
}
