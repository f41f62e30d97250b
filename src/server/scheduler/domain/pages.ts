/**
 * Keyset paging, one rule for every listing (ListDevices, ListHosts): a page
 * size of 0 means the default, larger sizes are cut to the maximum, and a
 * page token is the key of the last row served, opaque to clients.
 */
import { invalidArgument } from '../../../errors.js';
import type { PageRequest } from './inventory.js';

const DEFAULT_PAGE = 500;
const MAX_PAGE = 5000;

/** The number of rows a page of `page` holds. */
export const pageSizeOf = (page: PageRequest): number =>
  page.pageSize ? Math.min(Math.max(1, Math.trunc(page.pageSize)), MAX_PAGE) : DEFAULT_PAGE;

/** The token that continues a listing after the row whose key is `key`. */
export const pageTokenOf = (key: readonly string[]): string =>
  Buffer.from(JSON.stringify(key)).toString('base64url');

/** The key a page token this server issued continues after: `parts` strings, else INVALID_ARGUMENT. */
export function pageKeyOf(token: string, parts: number): string[] {
  let key: unknown;
  try {
    key = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
  } catch {
    key = null;
  }
  if (!Array.isArray(key) || key.length !== parts || key.some((x) => typeof x !== 'string')) {
    throw invalidArgument('page_token', `"${token}" is not a page token this server issued`);
  }
  return key as string[];
}

/** The token that continues a device listing after `d` (ListDevices pages by host, then address). */
export const pageTokenAfter = (d: { host: string; address: string }): string =>
  pageTokenOf([d.host, d.address]);

/** Every row of a keyset listing, a page at a time: `next(after)` reads the page after a key ('' first). */
export async function* everyRow<T>(next: (after: string) => Promise<T[]>, keyOf: (row: T) => string) {
  for (let page = await next(''); page.length > 0; page = await next(keyOf(page[page.length - 1]!))) {
    yield* page;
  }
}
