/** The clients' backoff lives with their channel options (src/client/channel.ts). */
export { Backoff, sleep } from '../../../client/channel.js';
