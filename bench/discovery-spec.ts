/** The device_spec the discovery and hotplug benchmarks give the agent on the large host. */

/**
 * 20 entries in the spirit of a real fleet's nova.conf: most name hardware
 * this host does not have (so every function is tried against them), then
 * globs, a regex, a devname and a PF address that covers its VFs.
 */
export const DEVICE_SPEC: unknown[] = [
  { vendor_id: '10de', product_id: '25b6', managed: false },
  { vendor_id: '10de', product_id: '2236' },
  { vendor_id: '15b3', product_id: '101e' },
  { vendor_id: '15b3', product_id: '1018' },
  { vendor_id: '1af4', product_id: '1041' },
  { vendor_id: '1002', product_id: '*' },
  { vendor_id: '8086', product_id: '0d58' },
  { address: '0001:*:*.*' },
  { address: 'ff:1f.7' },
  { address: { domain: '0002', bus: '.*', slot: '.*', function: '[0-7]' } },
  { vendor_id: '8086', product_id: '1889', address: '0000:30:*.*' },
  { devname: 'ens0f0', live_migratable: true },
  { address: '0000:12:00.0', traits: ['gold'] },
  { address: { bus: '1[4-9a-f]', function: '[0-7]' }, vendor_id: '8086', product_id: '154c' },
  { address: '0000:20:*.*', vendor_id: '8086', product_id: '154c' },
  { address: { bus: '2[0-9a-f]' }, vendor_id: '8086' },
  { vendor_id: '144d', product_id: 'a808', address: '0000:30:*.*' },
  { vendor_id: '144d', product_id: 'a808', resource_class: 'nvme_raw' },
  { vendor_id: '8086', product_id: '154c' },
  { vendor_id: '*', product_id: '*', address: '0000:00:1f.*' },
];
