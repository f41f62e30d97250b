/**
 * Listen addresses (`host:port`) of the servers (gRPC, metrics): checked
 * before binding, and bind failures worded for the operator — a port in use
 * or an address that is not this machine's is a FAILED_PRECONDITION naming the
 * address (reason ADDRESS_IN_USE / ADDRESS_NOT_AVAILABLE), not grpc-js's
 * "No address added out of total 1 resolved".
 */
import { BerthError, invalidArgument } from '../errors.js';

/** `host:port` (port 0 = any free port); anything else is INVALID_ARGUMENT on `listen`. */
export function parseListenAddress(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':');
  const host = i > 0 ? address.slice(0, i) : '';
  const portText = i > 0 ? address.slice(i + 1) : '';
  const port = /^\d{1,5}$/.test(portText) ? Number(portText) : Number.NaN;
  if (!host || !(port >= 0 && port <= 65535)) {
    throw invalidArgument('listen', `expected host:port (port 0-65535), got ${JSON.stringify(address)}`);
  }
  return { host, port };
}

/** What binding `address` failed with, worded for the operator. */
export function listenError(address: string, err: Error): Error {
  const m = err.message;
  if (/EADDRINUSE/.test(m)) {
    return new BerthError('FAILED_PRECONDITION', `port ${address} is in use`, {
      reason: 'ADDRESS_IN_USE',
      metadata: { address },
      cause: err,
    });
  }
  if (/EADDRNOTAVAIL/.test(m)) {
    return new BerthError('FAILED_PRECONDITION', `${address} is not an address of this machine`, {
      reason: 'ADDRESS_NOT_AVAILABLE',
      metadata: { address },
      cause: err,
    });
  }
  if (/EACCES/.test(m)) {
    return new BerthError('PERMISSION_DENIED', `not allowed to listen on ${address} (a port below 1024?)`, {
      reason: 'ADDRESS_NOT_ALLOWED',
      metadata: { address },
      cause: err,
    });
  }
  if (/Name resolution failed/.test(m)) {
    return invalidArgument('listen', `cannot resolve the host of ${JSON.stringify(address)}`);
  }
  return err;
}
