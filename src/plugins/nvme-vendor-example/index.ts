/** The vendor driver template; built in under the name `nvme-vendor-example`. */
import { VendorExampleNvmeDriver } from './vendor-example-driver.js';

export { VendorExampleNvmeDriver };
export default VendorExampleNvmeDriver;
