/**
 * The kubelet's plugin sockets: a gRPC server on a unix socket (a stale
 * socket file from an earlier run is removed first, as the kubelet expects
 * of every plugin), and the address to dial one.
 */
import { unlink } from 'node:fs/promises';
import { Server, ServerCredentials } from '@grpc/grpc-js';

export const dial = (path: string) => `unix://${path}`;

/** A server on the unix socket `path`, its services added by `add`. */
export async function serveUnix(path: string, add: (s: Server) => void): Promise<Server> {
  await unlink(path).catch(() => {});
  const server = new Server();
  add(server);
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(dial(path), ServerCredentials.createInsecure(), (err) =>
      err ? reject(err) : resolve(),
    ),
  );
  return server;
}
