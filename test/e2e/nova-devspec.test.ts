/**
 * device_spec means what it means in Nova: a differential test with Nova's own
 * code as the oracle (docs/decisions.md 44).
 *
 * test/fixtures/nova-devspec/oracle.py runs Debian's python3-nova 26.2.2
 * (nova/pci/whitelist.py, devspec.py, the placement translator; oslo,
 * os-resource-classes, os-traits) unmodified, on the same simulated sysfs tree
 * Berth reads (its docstring says how, and how the newer keys are mapped).
 * Berth's verdict goes through the agent's own path: the configuration file
 * read as `berth agent discover` reads it, the pci driver loaded by the plugin
 * host, discovery on the tree. The test compares the verdicts — refused or not,
 * which entry matches which function, and the tags (resource class, traits,
 * managed, live_migratable, one_time_use, physical_network, trusted,
 * remote_managed) — and fails on any difference that no row of the departures
 * table (docs/nova-device-spec.md, test/fixtures/nova-devspec/departures.ts)
 * explains. Regexes are checked on their own against Python's `re`.
 *
 * Seeded: NOVA_DIFF_SEED, NOVA_DIFF_CASES and NOVA_DIFF_REGEXES change the run
 * (defaults below). A case that fails is written to a file named in the
 * failure; keep it in vectors.json (or regex-vectors.json) once its cause is
 * fixed or documented, so it runs on every later run too.
 */

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { translatePythonRegex } from '../../src/plugins/device-spec/python-regex.js';
import { JsonFloat, parsePythonJson } from '../../src/plugins/device-spec/python-values.js';
import { writeSimProc } from '../../src/sim/host-use.js';
import { SysfsBuilder } from '../../src/sim/sysfs/builder.js';
import {
  agentConfigText,
  buildHost,
  type Case,
  caseArb,
  type Host,
  type JsonModel,
  lineText,
  PyFloat,
  type SpecLine,
} from '../fixtures/nova-devspec/cases.js';
import { berthVerdict, type Difference, differences, view } from '../fixtures/nova-devspec/compare.js';
import { DEPARTURES, departuresTable, explain } from '../fixtures/nova-devspec/departures.js';
import { NovaOracle, type NovaVerdict } from '../fixtures/nova-devspec/oracle-client.js';
import { pythonPattern, regexSubjects } from '../fixtures/nova-devspec/regex-cases.js';
import { tempDir } from '../helpers/agent.js';
import { available, novaTranslator } from '../helpers/prerequisites.js';

const SEED = Number(process.env['NOVA_DIFF_SEED'] ?? 30);
const CASES = Number(process.env['NOVA_DIFF_CASES'] ?? 5000);
const REGEXES = Number(process.env['NOVA_DIFF_REGEXES'] ?? 5000);
const HOSTS = 4;
const FIXTURES = join(process.cwd(), 'test/fixtures/nova-devspec');

interface Vector {
  /** "fixed": the hand-made host below; a number: the host generated from that seed. */
  host: 'fixed' | number;
  lines: string[];
  form: 'json' | 'yaml';
  /** "same": Berth decides as Nova; otherwise the departure row that explains the difference. */
  expect: string;
  note: string;
}

/** A host whose addresses the vectors can name: a plain NIC with eth0, a PF with two VFs (and netdevs), a PF with none, a GPU. */
async function buildFixedHost(root: string): Promise<Host> {
  const b = new SysfsBuilder(root);
  await b.addFunction({ address: '0000:0a:00.0', vendorId: '8086', productId: '1572', driver: 'e1000e' });
  const vfs = await b.addPf({
    address: '0000:3b:00.0',
    vendorId: '8086',
    productId: '1572',
    driver: 'i40e',
    totalVfs: 4,
    numVfs: 2,
    vf: { productId: '154c', driver: 'iavf' },
  });
  await b.addPf({
    address: '0000:3b:00.1',
    vendorId: '8086',
    productId: '1572',
    driver: 'i40e',
    totalVfs: 2,
    vf: { productId: '154c', driver: 'iavf' },
  });
  await b.addFunction({ address: '0000:5e:00.0', vendorId: '10de', productId: '25b6', driver: 'nvidia' });
  await b.addNetdev('0000:0a:00.0', 'eth0');
  await b.addNetdev('0000:3b:00.0', 'enp59s0f0');
  await b.addNetdev(vfs[0]!, 'enp59s0f0v0');
  return {
    root,
    procRoot: await writeSimProc(root),
    netdevs: ['eth0', 'enp59s0f0', 'enp59s0f0v0'],
    functions: [
      { address: '0000:0a:00.0', vendorId: '8086', productId: '1572', physfn: null, totalVfs: 0 },
      { address: '0000:3b:00.0', vendorId: '8086', productId: '1572', physfn: null, totalVfs: 4 },
      ...vfs.map((a) => ({
        address: a,
        vendorId: '8086',
        productId: '154c',
        physfn: '0000:3b:00.0',
        totalVfs: 0,
      })),
      { address: '0000:3b:00.1', vendorId: '8086', productId: '1572', physfn: null, totalVfs: 2 },
      { address: '0000:5e:00.0', vendorId: '10de', productId: '25b6', physfn: null, totalVfs: 0 },
    ],
  };
}

/** A line of a vector as the generator would have made it (models for the departure rules). */
function lineOf(text: string): SpecLine {
  const toModel = (v: unknown): JsonModel => {
    if (v instanceof JsonFloat) return new PyFloat(v.text);
    if (Array.isArray(v)) return v.map(toModel);
    if (v !== null && typeof v === 'object') {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toModel(x)]));
    }
    return v as JsonModel;
  };
  let value: unknown;
  try {
    value = parsePythonJson(text);
  } catch {
    return { kind: 'text', text };
  }
  const isEntry = (x: unknown) =>
    x !== null && typeof x === 'object' && !Array.isArray(x) && !(x instanceof JsonFloat);
  if (isEntry(value)) return { kind: 'entry', model: toModel(value) as Record<string, JsonModel> };
  if (Array.isArray(value) && value.every(isEntry)) {
    return { kind: 'list', models: value.map((m) => toModel(m) as Record<string, JsonModel>) };
  }
  return { kind: 'text', text };
}

const canRun = available(novaTranslator(), "the differential test against Nova's device_spec code");

describe('docs/nova-device-spec.md', () => {
  it('holds the departures table, row for row', () => {
    const doc = readFileSync('docs/nova-device-spec.md', 'utf8');
    const start = doc.indexOf('| id | input | Nova | Berth | why |');
    expect(start, 'the table header').toBeGreaterThan(0);
    const end = doc.indexOf('\n\n', start);
    expect(doc.slice(start, end === -1 ? undefined : end).trim()).toBe(departuresTable());
  });

  it('gives every row an id once, and says which tests pin it', () => {
    const ids = DEPARTURES.map((d) => d.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const d of DEPARTURES) {
      expect(d.pinnedBy.length, d.id).toBeGreaterThan(0);
      for (const file of d.pinnedBy) expect(() => readFileSync(file), `${d.id}: ${file}`).not.toThrow();
    }
  });
});

describe.skipIf(!canRun)("device_spec against Nova's own code (python3-nova 26.2.2)", () => {
  let oracle: NovaOracle;
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let hosts: Host[];
  let fixedHost: Host;
  let configs = 0;

  beforeAll(async () => {
    oracle = NovaOracle.start();
    dir = await tempDir('berth-nova-diff-');
    hosts = [];
    for (let i = 0; i < HOSTS; i++) hosts.push(await buildHost(join(dir.path, `host${i}`), SEED * 100 + i));
    fixedHost = await buildFixedHost(join(dir.path, 'fixed'));
    mkdirSync(join(dir.path, 'configs'));
  }, 60_000);

  afterAll(async () => {
    await oracle?.close();
    await dir?.cleanup();
  });

  /** Both verdicts on each case, and the differences no departure row explains. */
  async function run(cases: Case[], hostOf: (c: Case) => Host) {
    const nova = new Map<Case, NovaVerdict>();
    const byHost = new Map<Host, Case[]>();
    for (const c of cases) byHost.set(hostOf(c), [...(byHost.get(hostOf(c)) ?? []), c]);
    await Promise.all(
      [...byHost].map(async ([host, list]) => {
        const verdicts = await oracle.devspec(
          host.root,
          list.map((c) => c.lines.map(lineText)),
        );
        for (const [i, c] of list.entries()) nova.set(c, verdicts[i]!);
      }),
    );
    const results: {
      c: Case;
      diffs: { d: Difference; row: string | null }[];
      nova: NovaVerdict;
      berth: unknown;
    }[] = [];
    // A few configurations at a time: discovery reads files, and there are two cores.
    const queue = [...cases];
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        for (let c = queue.shift(); c; c = queue.shift()) {
          const file = join(dir.path, 'configs', `c${configs++}.yaml`);
          await writeFile(file, agentConfigText(c, hostOf(c), join(dir.path, 'state')));
          const berth = await berthVerdict(file);
          const n = nova.get(c)!;
          const v = view(c, n, berth);
          const diffs = differences(n, berth).map((d) => ({ d, row: explain(d, v) }));
          results.push({ c, diffs, nova: n, berth });
        }
      }),
    );
    return results;
  }

  it('accepts the regexes Python accepts, with the same matches, and refuses the rest naming why', async () => {
    const started = Date.now();
    const subjects = regexSubjects();
    const kept = JSON.parse(readFileSync(join(FIXTURES, 'regex-vectors.json'), 'utf8')) as {
      pattern: string;
    }[];
    const patterns = [
      ...kept.map((k) => k.pattern),
      ...fc.sample(pythonPattern, { seed: SEED, numRuns: REGEXES }),
    ];
    const python = await oracle.regex(patterns.map((pattern) => ({ pattern, subjects })));
    const failures: { pattern: string; python: string | null; berth: string; subject?: string }[] = [];
    const counts = { ok: 0, invalid: 0, unsupported: 0 };
    patterns.forEach((pattern, k) => {
      const py = python[k]!;
      const t = translatePythonRegex(pattern);
      counts[t.kind]++;
      const berth = t.kind === 'ok' ? `ok: ${t.source}` : `${t.kind}: ${t.message}`;
      if (t.kind === 'invalid' && py.error === null) failures.push({ pattern, python: null, berth });
      // \N{name}: Berth cannot tell a known name from an unknown one, and refuses both.
      if (t.kind === 'unsupported' && py.error !== null && !pattern.includes('\\N')) {
        failures.push({ pattern, python: py.error, berth });
      }
      if (t.kind === 'ok') {
        if (py.error !== null) {
          failures.push({ pattern, python: py.error, berth });
          return;
        }
        const re = new RegExp(`^(?:${t.source})`, t.flags);
        subjects.forEach((subject, i) => {
          if (re.test(subject) !== py.matches[i]) {
            failures.push({ pattern, python: `matches: ${py.matches[i]}`, berth, subject });
          }
        });
      }
    });
    const file = join(dir.path, 'regex-failures.json');
    writeFileSync(file, JSON.stringify(failures, null, 2));
    console.log(
      `nova-devspec regexes: ${patterns.length} patterns x ${subjects.length} subjects (seed ${SEED}): ${counts.ok} translated, ${counts.invalid} refused as Python refuses them, ${counts.unsupported} refused by construct; ${failures.length} differences; ${Date.now() - started} ms`,
    );
    for (const f of failures.slice(0, 3)) console.log(JSON.stringify(f));
    expect(failures.slice(0, 10), `all ${failures.length} in ${file}`).toEqual([]);
  }, 120_000);

  it('decides as Nova on generated device_spec lists, except where a departure row says otherwise', async () => {
    const started = Date.now();
    const cases = fc.sample(caseArb(hosts, pythonPattern), { seed: SEED, numRuns: CASES });
    const results = await run(cases, (c) => hosts[c.host]!);
    const byRow = new Map<string, number>();
    let same = 0;
    const unexplained: unknown[] = [];
    for (const r of results) {
      if (r.diffs.length === 0) same++;
      for (const { d, row } of r.diffs) {
        if (row === null) {
          unexplained.push({
            vector: { host: SEED * 100 + r.c.host, lines: r.c.lines.map(lineText), form: r.c.form },
            difference: d,
            nova: r.nova,
            berth: r.berth,
          });
        } else {
          byRow.set(row, (byRow.get(row) ?? 0) + 1);
        }
      }
    }
    const file = join(dir.path, 'devspec-failures.json');
    writeFileSync(file, JSON.stringify(unexplained, null, 2));
    const refused = results.filter((r) => r.nova.status !== 'ok').length;
    const novaErrors: Record<string, number> = {};
    for (const r of results)
      if (r.nova.status !== 'ok') novaErrors[r.nova.error] = (novaErrors[r.nova.error] ?? 0) + 1;
    console.log(
      `nova-devspec: ${results.length} cases on ${HOSTS} hosts (seed ${SEED}): ${same} identical (${refused} refused by Nova: ${JSON.stringify(novaErrors)}), departures ${JSON.stringify(Object.fromEntries(byRow))}, ${unexplained.length} unexplained; ${Date.now() - started} ms`,
    );
    for (const u of unexplained.slice(0, 3)) console.log(JSON.stringify(u));
    expect(unexplained.slice(0, 5), `all ${unexplained.length} in ${file}`).toEqual([]);
  }, 120_000);

  it('decides as Nova on the fixed vectors, and departs exactly where each says', async () => {
    const vectors = JSON.parse(readFileSync(join(FIXTURES, 'vectors.json'), 'utf8')) as Vector[];
    const seeded = new Map<number, Host>();
    for (const v of vectors) {
      if (v.host !== 'fixed' && !seeded.has(v.host)) {
        seeded.set(v.host, await buildHost(join(dir.path, `seeded${v.host}`), v.host));
      }
    }
    const cases = vectors.map((v): Case => ({ host: 0, lines: v.lines.map(lineOf), form: v.form }));
    const vectorOf = new Map(cases.map((c, i) => [c, vectors[i]!]));
    const results = await run(cases, (c) => {
      const v = vectorOf.get(c)!;
      return v.host === 'fixed' ? fixedHost : seeded.get(v.host)!;
    });
    const wrong = results.flatMap((r) => {
      const v = vectorOf.get(r.c)!;
      const rows = [...new Set(r.diffs.map((x) => x.row ?? 'unexplained'))];
      const expected = v.expect === 'same' ? [] : [v.expect];
      return JSON.stringify(rows) === JSON.stringify(expected)
        ? []
        : [{ vector: v, rows, diffs: r.diffs, nova: r.nova }];
    });
    for (const w of wrong) console.log(JSON.stringify(w).slice(0, 1500));
    expect(wrong).toEqual([]);
    // Every row with a rule has an example among the vectors.
    const examples = new Set(vectors.map((v) => v.expect));
    for (const d of DEPARTURES) if (d.explains) expect(examples.has(d.id), `a vector for ${d.id}`).toBe(true);
  }, 120_000);

  it("shows Berth's side of the rows the generated cases cannot reach, on the fixed host", async () => {
    const at = async (lines: string[], form: 'json' | 'yaml' = 'json') => {
      const file = join(dir.path, 'configs', `side${configs++}.yaml`);
      await writeFile(
        file,
        agentConfigText({ host: 0, lines: lines.map(lineOf), form }, fixedHost, join(dir.path, 'state')),
      );
      const v = await berthVerdict(file);
      if (v.status !== 'ok') throw new Error(v.message);
      return v.devices;
    };
    // pf-with-vfs: the PF with VFs enabled is matched and excluded; its VFs are offered.
    const all = await at(['{"vendor_id": "8086"}']);
    expect(all['0000:3b:00.0']!.excluded).toMatch(/SR-IOV PF with 2 VFs enabled/);
    expect(all['0000:3b:02.0']!.excluded).toBeNull();
    // one-time-use-vf: VFs matched by one_time_use: true are excluded; false is ignored.
    const otu = await at(['{"product_id": "154c", "one_time_use": true}']);
    expect(otu['0000:3b:02.0']!.excluded).toMatch(/one_time_use applies to PFs and plain functions/);
    expect(
      (await at(['{"product_id": "154c", "one_time_use": false}']))['0000:3b:02.0']!.excluded,
    ).toBeNull();
    // own-traits: OWNER_BERTH on every device, HW_ONE_TIME_USE and HW_PCI_LIVE_MIGRATABLE from the keys.
    const gpu = (await at(['{"vendor_id": "10de", "one_time_use": "yes", "live_migratable": "1"}']))[
      '0000:5e:00.0'
    ]!;
    expect(gpu.traits).toEqual(['HW_ONE_TIME_USE', 'HW_PCI_LIVE_MIGRATABLE', 'OWNER_BERTH']);
    // physical-network-placement: a device with a physical_network is offered, with the attribute.
    const nic = (await at(['{"address": "0000:0a:00.0", "physical_network": "physnet1"}']))['0000:0a:00.0']!;
    expect([nic.excluded, nic.attributes?.['physical_network']]).toEqual([null, 'physnet1']);
  });
});
