/** Simulated sysfs trees: see builder.ts for the layout. */
export * from './builder.js';
export { buildConfigSpace, type ConfigSpaceFields } from './config-space.js';
export { type LargeHostOptions, largeHostSpec } from './large-host.js';
