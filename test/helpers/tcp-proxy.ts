/**
 * A TCP proxy on 127.0.0.1 for network-fault tests. It forwards every
 * connection to a target and can `cut()` the link: every open connection is
 * destroyed at once (both sides see a reset, as when a cable is pulled or a
 * firewall drops state) and new connections are refused (accepted and closed
 * immediately) until `restore()`. gRPC's HTTP/2 connections then break the way
 * they do on a real network partition, which in-process server stops cannot
 * imitate (those close politely with GOAWAY).
 */
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';

export interface TcpProxy {
  /** `127.0.0.1:PORT`: the address to give clients instead of the target's. */
  readonly address: string;
  readonly port: number;
  /** Connections accepted and forwarded since start (refused ones excluded). */
  readonly forwarded: number;
  /**
   * Connections refused while cut, since start: each is a peer's attempt to
   * get through, which a test can wait for before asserting that nothing did.
   */
  readonly refused: number;
  /** Connections currently open through the proxy. */
  readonly open: number;
  /** Whether the link is cut. */
  readonly isCut: boolean;
  /** Changes where new connections go (open ones keep their target). */
  retarget(target: string): void;
  /**
   * Destroys every open connection and refuses new ones until restore();
   * with `forMs`, restores by itself after that long.
   */
  cut(forMs?: number): void;
  restore(): void;
  close(): Promise<void>;
}

function splitAddress(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':');
  const port = Number(address.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port <= 0) throw new Error(`bad address ${address}`);
  return { host: address.slice(0, i), port };
}

/** Starts a proxy listening on 127.0.0.1 (`port` 0 = any free port) forwarding to `target`. */
export async function startTcpProxy(target: string, port = 0): Promise<TcpProxy> {
  let dest = splitAddress(target);
  if (dest.host !== '127.0.0.1' && dest.host !== 'localhost') {
    throw new Error(`tcp-proxy forwards to loopback only, not ${target}`);
  }
  let cut = false;
  let restoreTimer: NodeJS.Timeout | undefined;
  let forwarded = 0;
  let refused = 0;
  /** Each pair is the client side and the upstream side of one connection. */
  const pairs = new Set<[Socket, Socket]>();

  const server: Server = createServer((client) => {
    if (cut) {
      refused++;
      client.resetAndDestroy();
      return;
    }
    forwarded++;
    const upstream = tcpConnect({ host: dest.host, port: dest.port });
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop);
    upstream.on('error', drop);
    client.on('close', drop);
    upstream.on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address();
  const boundPort = typeof addr === 'object' && addr ? addr.port : 0;

  const proxy: TcpProxy = {
    address: `127.0.0.1:${boundPort}`,
    port: boundPort,
    get forwarded() {
      return forwarded;
    },
    get refused() {
      return refused;
    },
    get open() {
      return pairs.size;
    },
    get isCut() {
      return cut;
    },
    retarget(t) {
      dest = splitAddress(t);
    },
    cut(forMs) {
      cut = true;
      clearTimeout(restoreTimer);
      for (const [a, b] of [...pairs]) {
        // A reset, not a FIN: the peers must not see an orderly close.
        a.resetAndDestroy();
        b.resetAndDestroy();
      }
      pairs.clear();
      if (forMs !== undefined) {
        restoreTimer = setTimeout(() => proxy.restore(), forMs);
        restoreTimer.unref();
      }
    },
    restore() {
      clearTimeout(restoreTimer);
      cut = false;
    },
    async close() {
      clearTimeout(restoreTimer);
      cut = true;
      for (const [a, b] of [...pairs]) {
        a.destroy();
        b.destroy();
      }
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}
