import { PciDriver } from './pci-driver.js';

export { PciDriver };
export default PciDriver;
