/** Simulated sysfs trees: see builder.ts for the layout. */
export * from './builder.js';
export { largeHostSpec } from './large-host.js';
