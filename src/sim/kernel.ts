/**
 * The kernel's part of NVMe namespace management on a simulated host. On a
 * real host, after `nvme ns-rescan` the kernel adds and removes the block
 * devices of the namespaces attached to each controller; here the simulator
 * (a separate process) only changes its state file, so whoever runs it must
 * bring the simulated sysfs tree in line: `syncNvmeNamespaces` does that for
 * every controller, and `SimKernelRunner` does it after each successful
 * `ns-rescan` a driver or the agent runs (tests pass it to the agent as its
 * command runner).
 */
import type { CommandResult, CommandRunner, RunOptions } from '../plugins/command-runner.js';
import { readNvmeSimState } from './nvme-cli/state-file.js';
import { controllersOf, holderOf, isAttached, snapshotOf } from './nvme-cli/subsystem.js';
import type { SysfsBuilder } from './sysfs/builder.js';

/** Makes sysfs show, under every simulated controller, the namespaces the simulator has attached to it. */
export async function syncNvmeNamespaces(sysfs: SysfsBuilder, statePath: string): Promise<void> {
  const state = await readNvmeSimState(statePath);
  const known = new Set(sysfs.nvmeControllers());
  const wanted = state.controllers
    .filter((c) => known.has(c.name))
    .map((c) => {
      const view = snapshotOf(state, c);
      return {
        name: c.name,
        shared: controllersOf(state, holderOf(state, c)).length > 1,
        namespaces: view.namespaces
          .filter((n) => isAttached(n, view))
          .map((n) => ({
            nsid: n.nsid,
            sizeBytes: n.sizeBytes,
            lbaSize: n.lbaSize,
            // The identifiers nvme-cli's id-ns gives, so sysfs shows the same after a rescan.
            ...(n.nguid === undefined ? {} : { nguid: n.nguid }),
            ...(n.eui64 === undefined ? {} : { eui64: n.eui64 }),
            ...(n.uuid === undefined ? {} : { uuid: n.uuid }),
          })),
      };
    });
  // A shared namespace re-created with another size must leave every controller before it returns.
  for (const w of wanted) if (w.shared) await sysfs.setNvmeNamespaces(w.name, []);
  for (const w of wanted) await sysfs.setNvmeNamespaces(w.name, w.namespaces);
}

/** A command runner that, after a successful `ns-rescan` of the simulator, updates sysfs as the kernel would. */
export class SimKernelRunner implements CommandRunner {
  constructor(
    private readonly inner: CommandRunner,
    private readonly sysfs: SysfsBuilder,
    private readonly statePath: string,
    /** The nvme-cli wrapper(s) bound to `statePath`. */
    private readonly nvmeCli: string | readonly string[],
  ) {}

  async run(file: string, args: readonly string[], options?: RunOptions): Promise<CommandResult> {
    const r = await this.inner.run(file, args, options);
    const isSim = typeof this.nvmeCli === 'string' ? file === this.nvmeCli : this.nvmeCli.includes(file);
    if (isSim && args[0] === 'ns-rescan' && r.code === 0)
      await syncNvmeNamespaces(this.sysfs, this.statePath);
    return r;
  }
}
