/**
 * Public surface of the nvme-cli 2.3 simulator for the rest of Berth (tests,
 * the simulated host, the demo). The executable is main.ts (bin/nvme-sim in a checkout).
 */
export { type CliEnv, type CliResult, cliEnvFrom, runCli, VERSION_TEXT } from './main.js';
export type {
  NvmeSimState,
  SimControllerState,
  SimFault,
  SimNamespaceState,
  SimSanitizeState,
} from './state.js';
export { withStateLock } from './state.js';
export {
  controllerFromSpec,
  createNvmeSimState,
  type NvmeSimSpec,
  nvmeSimStateSchema,
  readNvmeSimState,
  type SimControllerSpec,
  type SimNamespaceSpec,
  simControllerSchema,
  simFaultSchema,
  simNamespaceSchema,
} from './state-file.js';
export {
  namespaceManagementWorks,
  plantTenantData,
  readableTenantData,
  spreadTenantWrites,
  TENANT_MARK,
  type TenantWrite,
} from './tenant-data.js';
export { NVME_SIM_COMMAND, writeNvmeWrapper } from './wrapper.js';
