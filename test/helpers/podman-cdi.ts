/**
 * A container started by podman with runc from one of Berth's CDI device
 * names (docs/kubernetes.md): the real consumer of the specs the DRA plugin
 * and the device plugin write. Needs podmanRunc() (./prerequisites.ts) and
 * the spec in /var/run/cdi, where podman 4.3 reads them.
 */
import { execFile } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The spec's device nodes (kind-wide and of its devices) made real: /dev/null's numbers, as there is no VFIO device here. */
export async function makeSpecNodes(spec: {
  containerEdits: { deviceNodes?: { hostPath: string }[] };
  devices: { containerEdits: { deviceNodes?: { hostPath: string }[] } }[];
}): Promise<void> {
  const nodes = [spec.containerEdits, ...spec.devices.map((d) => d.containerEdits)].flatMap(
    (e) => e.deviceNodes ?? [],
  );
  for (const n of nodes) {
    await mkdir(dirname(n.hostPath), { recursive: true });
    await rm(n.hostPath, { force: true });
    await run('mknod', ['-m', '666', n.hostPath, 'c', '1', '3']);
  }
}

/** What `env; ls -l /dev/vfio` prints in a busybox container given `--device <cdiId>`. */
export async function podmanWithCdiDevice(cdiId: string, tag: string): Promise<string> {
  const work = join(tmpdir(), `berth-podman-${tag}`);
  await mkdir(join(work, 'root', 'bin'), { recursive: true });
  try {
    await writeFile(join(work, 'containers.conf'), '[containers]\ndefault_ulimits = []\n');
    await run('cp', ['/bin/busybox', join(work, 'root', 'bin', 'busybox')]);
    await run('ln', ['-sf', 'busybox', join(work, 'root', 'bin', 'sh')]);
    await run('tar', ['-C', join(work, 'root'), '-cf', join(work, 'bb.tar'), '.']);
    const podman = ['--storage-driver', 'vfs'];
    await run('podman', [...podman, 'import', join(work, 'bb.tar'), 'localhost/berth-dra-bb:1']);
    const { stdout } = await run(
      'podman',
      [
        ...podman,
        '--runtime',
        'runc',
        '--cgroup-manager',
        'cgroupfs',
        'run',
        '--rm',
        '--network',
        'none',
        '--device',
        cdiId,
        'localhost/berth-dra-bb:1',
        '/bin/sh',
        '-c',
        'env; ls -l /dev/vfio',
      ],
      { env: { ...process.env, CONTAINERS_CONF: join(work, 'containers.conf') }, timeout: 120_000 },
    );
    return stdout;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
