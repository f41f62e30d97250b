/**
 * `buf build` of proto/ (npm run gen): real per-file descriptors with their
 * imports, and the RPCs' options (idempotency levels). It lies beside the
 * generated code — src/gen in a checkout, dist/gen in the package (the build
 * copies it) — so it is found relative to this module in both.
 */
export const DESCRIPTOR_SET = new URL('./gen/berth.binpb', import.meta.url);
