/** The vendor driver template; built in under the name `nvme-vendor-example`. */
import { vendorExampleDriver } from './vendor-example-driver.js';

export { vendorExampleDriver };
export default vendorExampleDriver;
