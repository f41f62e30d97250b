import { pciDriver } from './pci-driver.js';

export { PciDriver, pciDriver } from './pci-driver.js';
export default pciDriver;
