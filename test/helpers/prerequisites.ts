/**
 * The real tools some tests use as oracles, each checked by doing what the
 * tests do with it (not by finding a file): protoc must compile a file that
 * imports a well-known type, virt-xml-validate must validate a domain, and so
 * on. A test whose tool is missing is skipped with one line saying what is
 * missing and which Debian package brings it.
 *
 * On CI (`.ci/run` sets BERTH_REQUIRE_TOOLS=1) a missing tool is an error
 * instead: the file fails, so a package `.ci/run` forgot to install shows up
 * as a red run, not as a silent skip.
 */
import { execFileSync } from 'node:child_process';
import { accessSync, constants, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VIRT_XML_VALIDATE, wrapInDomain } from '../../src/server/scheduler/guest/virt-xml.js';

export interface Prerequisite {
  /** What the tests need, e.g. "virt-xml-validate". */
  name: string;
  /** null when usable; otherwise what is wrong. */
  missing: string | null;
  /** The Debian packages that provide it (as `.ci/run` installs them); empty for machine properties. */
  packages: string[];
}

const cache = new Map<string, Prerequisite>();

function check(name: string, packages: string[], probe: () => string | null): Prerequisite {
  const known = cache.get(name);
  if (known) return known;
  let missing: string | null;
  try {
    missing = probe();
  } catch (err) {
    const e = err as { stderr?: Buffer | string; message: string };
    const detail = (e.stderr?.toString().trim() || e.message).split('\n')[0];
    missing = detail ?? 'failed';
  }
  const p = { name, missing, packages };
  cache.set(name, p);
  return p;
}

const run = (cmd: string, args: string[], cwd?: string) =>
  execFileSync(cmd, args, { stdio: 'pipe', timeout: 60_000, ...(cwd ? { cwd } : {}) }).toString();

function withTempDir<T>(fn: (dir: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), 'berth-prereq-'));
  try {
    return fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** libvirt's `virt-xml-validate` with its schemas and xmllint: it must accept the smallest domain. */
export const virtXmlValidate = () =>
  check('virt-xml-validate', ['libvirt-clients', 'libxml2-utils'], () =>
    withTempDir((dir) => {
      if (!existsSync(VIRT_XML_VALIDATE)) return `${VIRT_XML_VALIDATE} not found`;
      const file = join(dir, 'd.xml');
      writeFileSync(file, wrapInDomain(''));
      run(VIRT_XML_VALIDATE, [file, 'domain']);
      return null;
    }),
  );

/** pciutils' lspci, able to read a sysfs tree. */
export const lspci = () =>
  check('lspci', ['pciutils'], () => {
    run('lspci', ['--version']);
    return null;
  });

/** PCI functions in this machine's /sys (a property of the machine, not a package). */
export const realPciDevices = () =>
  check('PCI devices in /sys/bus/pci/devices', [], () =>
    existsSync('/sys/bus/pci/devices') && readdirSync('/sys/bus/pci/devices').length > 0
      ? null
      : 'this machine (or container) shows no PCI functions',
  );

/** systemd's udevadm (package udev): the agent's kernel event source, and the simulator's oracle. */
export const UDEVADM = '/bin/udevadm';
export const udevadm = () =>
  check('udevadm', ['udev'], () => {
    if (!existsSync(UDEVADM)) return `${UDEVADM} not found`;
    run(UDEVADM, ['--version']);
    return null;
  });

/**
 * A PCI function whose `uevent` this process may write (root, /sys mounted
 * read-write): writing `change` there makes the kernel send a real uevent.
 * A property of the machine (a container may mount /sys read-only).
 */
export const writableUevent = () =>
  check('a writable /sys/bus/pci/devices/*/uevent (root, /sys read-write)', [], () => {
    if (process.getuid?.() !== 0) return 'the tests do not run as root';
    const dir = '/sys/bus/pci/devices';
    const first = existsSync(dir) ? readdirSync(dir).sort()[0] : undefined;
    if (!first) return 'this machine (or container) shows no PCI functions';
    try {
      accessSync(join(dir, first, 'uevent'), constants.W_OK);
    } catch (e) {
      return `${join(dir, first, 'uevent')} is not writable: ${(e as Error).message}`;
    }
    return null;
  });

/** The real nvme-cli 2.3 the simulator is checked against (no hardware needed). */
export const REAL_NVME = '/usr/sbin/nvme';
export const realNvmeCli = () =>
  check('nvme-cli 2.3', ['nvme-cli'], () => {
    if (!existsSync(REAL_NVME)) return `${REAL_NVME} not found`;
    const v = run(REAL_NVME, ['version']);
    return /nvme version 2\.3\b/.test(v) ? null : `${REAL_NVME} is not 2.3: ${v.split('\n')[0]}`;
  });

/** openssl, to make the TLS tests' certificates at run time. */
export const openssl = () =>
  check('openssl', ['openssl'], () => {
    run('openssl', ['version']);
    return null;
  });

/** util-linux's `script`, to give a command a pseudo-terminal. */
export const SCRIPT_BIN = '/usr/bin/script';
export const scriptPty = () =>
  check('script (a pseudo-terminal)', ['bsdutils'], () => {
    if (!existsSync(SCRIPT_BIN)) return `${SCRIPT_BIN} not found`;
    run(SCRIPT_BIN, ['-qec', 'true', '/dev/null']);
    return null;
  });

/** systemd's `systemd-analyze`, to verify the packaged units. */
export const systemdAnalyze = () =>
  check('systemd-analyze', ['systemd'], () => {
    run('systemd-analyze', ['--version']);
    return null;
  });

/** PostgreSQL's server binaries (Debian keeps them under /usr/lib/postgresql/<version>/bin). */
export const postgresBin = (): string | null => {
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return null;
  const versions = readdirSync(base)
    .filter((v) => existsSync(join(base, v, 'bin', 'postgres')) && existsSync(join(base, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? join(base, versions[0], 'bin') : null;
};
export const postgresServer = () =>
  check('postgres', ['postgresql'], () => {
    const bin = postgresBin();
    if (!bin) return 'no initdb/postgres under /usr/lib/postgresql/*/bin';
    run(join(bin, 'postgres'), ['--version']);
    return null;
  });

/** Running as root (loop devices): a property of how the tests are run, not a package. */
export const root = () =>
  check('root', [], () => (process.getuid?.() === 0 ? null : 'the tests do not run as root'));

/** losetup, to attach loop devices. */
export const losetup = () =>
  check('losetup', ['mount'], () => {
    run('losetup', ['--version']);
    return null;
  });

/**
 * A Python gRPC client generated from proto/: /usr/bin/python3 with grpcio and
 * protobuf, protoc that finds the well-known types (google/protobuf/*.proto
 * come with libprotobuf-dev, not with protobuf-compiler), and
 * grpc_python_plugin. Debian's grpc_tools bundles protoc 3.5, too old for
 * proto3 `optional`, hence the separate compiler.
 */
export const PYTHON = '/usr/bin/python3';
export const GRPC_PYTHON_PLUGIN = '/usr/bin/grpc_python_plugin';
export const pythonGrpc = () =>
  check(
    'Python gRPC client tools',
    ['python3-grpcio', 'protobuf-compiler', 'protobuf-compiler-grpc', 'libprotobuf-dev'],
    () =>
      withTempDir((dir) => {
        run(PYTHON, ['-c', 'import grpc, google.protobuf']);
        if (!existsSync(GRPC_PYTHON_PLUGIN)) return `${GRPC_PYTHON_PLUGIN} not found`;
        writeFileSync(
          join(dir, 'probe.proto'),
          'syntax = "proto3";\nimport "google/protobuf/timestamp.proto";\nmessage Probe { google.protobuf.Timestamp t = 1; optional int32 n = 2; }\n',
        );
        run(
          'protoc',
          [
            '-I.',
            `--python_out=${dir}`,
            `--grpc_out=${dir}`,
            `--plugin=protoc-gen-grpc=${GRPC_PYTHON_PLUGIN}`,
            'probe.proto',
          ],
          dir,
        );
        return null;
      }),
  );

/** OpenStack Placement's server (Debian's placement-api: Placement 8.0.0, microversions 1.0–1.39). */
export const PLACEMENT_API = '/usr/bin/placement-api';
export const PLACEMENT_MANAGE = '/usr/bin/placement-manage';
export const placementApi = () =>
  check('placement-api', ['placement-api'], () => {
    if (!existsSync(PLACEMENT_API)) return `${PLACEMENT_API} not found`;
    if (!existsSync(PLACEMENT_MANAGE)) return `${PLACEMENT_MANAGE} not found`;
    run(PYTHON, ['-c', 'import placement.wsgi']);
    return null;
  });

/**
 * OpenStack Keystone 22 (Debian's python3-keystone): keystone-wsgi-public and
 * keystone's package for /usr/bin/python3, which test/helpers/keystone.ts
 * starts. The package's metadata is read, not imported: importing keystone
 * takes tens of seconds on a loaded machine, and the start says what fails.
 */
export const KEYSTONE_WSGI = '/usr/bin/keystone-wsgi-public';
export const keystoneServer = () =>
  check('keystone 22', ['python3-keystone'], () => {
    if (!existsSync(KEYSTONE_WSGI)) return `${KEYSTONE_WSGI} not found`;
    const v = run(PYTHON, ['-c', 'import importlib.metadata as m; print(m.version("keystone"))']).trim();
    return v.startsWith('22.') ? null : `keystone ${v} is not 22 (Zed)`;
  });

/** The OpenStack CLI with osc-placement (`openstack resource provider …`). */
export const OPENSTACK_CLI = '/usr/bin/openstack';
export const openstackCli = () =>
  check(
    'openstack resource provider (osc-placement)',
    ['python3-openstackclient', 'python3-osc-placement'],
    () => {
      if (!existsSync(OPENSTACK_CLI)) return `${OPENSTACK_CLI} not found`;
      run(PYTHON, ['-c', 'import osc_placement.resources.resource_provider']);
      return null;
    },
  );

/** Nova's own code (its PCI Placement translator and device_spec parser), run by /usr/bin/python3. */
export const novaTranslator = () =>
  check("Nova's PCI Placement translator", ['python3-nova'], () => {
    run(PYTHON, ['-c', 'import nova.compute.pci_placement_translator, nova.pci.devspec']);
    return null;
  });

/** Nova's own Cyborg client (nova/accelerator/cyborg.py, `_CyborgClient`), run by /usr/bin/python3. */
export const novaCyborgClient = () =>
  check("Nova's Cyborg client", ['python3-nova'], () => {
    run(PYTHON, ['-c', 'import nova.accelerator.cyborg']);
    return null;
  });

/** openstacksdk's accelerator proxy and `openstack accelerator …` (python-cyborgclient). */
export const openstackAccelerator = () =>
  check(
    'openstacksdk and openstack accelerator',
    ['python3-openstacksdk', 'python3-cyborgclient', 'python3-openstackclient'],
    () => {
      run(PYTHON, ['-c', 'import openstack.accelerator.v2._proxy, cyborgclient.osc.plugin']);
      if (!existsSync(OPENSTACK_CLI)) return `${OPENSTACK_CLI} not found`;
      return null;
    },
  );

/** os-resource-classes and os-traits, the lists os-names.ts is generated from. */
export const osPlacementNames = () =>
  check('os-resource-classes and os-traits', ['python3-os-resource-classes', 'python3-os-traits'], () => {
    run(PYTHON, ['-c', 'import os_resource_classes, os_traits']);
    return null;
  });

/** Python's `cryptography` (Ed25519) for /usr/bin/python3: the erasure certificate example's verifier. */
export const pythonCryptography = () =>
  check("Python's cryptography (Ed25519)", ['python3-cryptography'], () => {
    run(PYTHON, ['-c', 'from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey']);
    return null;
  });

/**
 * dash (a POSIX sh without bash's extensions), jq and OpenSSL 3's
 * `pkeyutl -rawin`: the openssl recipe of docs/erasure-certificates.md.
 */
export const shOpensslRecipe = () =>
  check('dash, jq and OpenSSL 3 (pkeyutl -rawin)', ['dash', 'jq', 'openssl'], () => {
    run('dash', ['-c', 'true']);
    run('jq', ['--version']);
    const v = run('openssl', ['version']);
    return /^OpenSSL [3-9]\./.test(v) ? null : `openssl is not OpenSSL 3 (pkeyutl -rawin): ${v.trim()}`;
  });

/** PyYAML (a YAML 1.1 reader) for /usr/bin/python3: the check that -o yaml reads back with its types. */
export const pythonYaml = () =>
  check('PyYAML', ['python3-yaml'], () => {
    run(PYTHON, ['-c', 'import yaml; yaml.safe_load("a: 1")']);
    return null;
  });

/**
 * Podman with runc, as root, reading CDI specs (docs/kubernetes.md): the
 * container runtime the DRA plugin's CDI specs are checked against. crun,
 * podman's default here, fails on this machine's cgroups; runc works.
 */
export const podmanRunc = () =>
  check('podman and runc (as root)', ['podman', 'runc'], () => {
    if (process.getuid?.() !== 0) return 'the tests do not run as root';
    run('podman', ['--version']);
    run('runc', ['--version']);
    return null;
  });

/**
 * Whether `p` is usable. When it is not: one line on stderr naming what is
 * missing and the package to install, and false (skip) — or, with
 * BERTH_REQUIRE_TOOLS=1, an error that fails the file.
 */
export function available(p: Prerequisite, what: string): boolean {
  if (p.missing === null) return true;
  const install = p.packages.length ? ` (apt-get install ${p.packages.join(' ')})` : '';
  const line = `${what}: needs ${p.name}${install}: ${p.missing}`;
  if (process.env.BERTH_REQUIRE_TOOLS === '1' && p.packages.length > 0) {
    throw new Error(`${line} — required because BERTH_REQUIRE_TOOLS=1 (.ci/run installs it)`);
  }
  console.warn(`skipped: ${line}`);
  return false;
}
