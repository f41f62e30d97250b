/**
 * Public surface of the nvme-cli 2.3 simulator for the rest of Berth (tests,
 * the simulated host, the demo). The executable is main.ts (bin/nvme-sim in a checkout).
 */
export { cliEnvFrom, runCli } from './main.js';
export type { SimFault } from './state.js';
export { withStateLock } from './state.js';
export {
  createNvmeSimState,
  type NvmeSimSpec,
  readNvmeSimState,
  type SimControllerSpec,
  setSmartCounters,
} from './state-file.js';
export {
  namespaceManagementWorks,
  plantTenantData,
  readableTenantData,
  spreadTenantWrites,
  TENANT_MARK,
  type TenantWrite,
} from './tenant-data.js';
export { writeNvmeWrapper } from './wrapper.js';
