/**
 * Binding accelerator requests to devices, with invariants 9 and 13 at bind
 * time: before the scheduler acknowledges a bind, the agent of every bound
 * device that is cleaned or one-time-use records the binding in its own
 * durable journal (RecordBinding) — the second record of the media's dirt, and
 * of its burn (docs/decisions.md 30).
 *
 * - In the bind's unit, before anything is allocated, the gate refuses a
 *   device that is cleaned on a host whose agent is not connected
 *   (UNAVAILABLE) or too old to record bindings (FAILED_PRECONDITION), judged
 *   from the host's row as the unit locked it and the links this scheduler
 *   follows. The judge is pure: the unit may run again, and has no effect
 *   outside the store (docs/decisions.md 67, 91); the client to another
 *   scheduler's agent is made after the commit, from the row the unit read.
 * - A bind that fails is recorded on its ARQs (bind_failed, and Nova's event
 *   when it waits for one) by a unit of its own, after the bind's.
 * - After the bind committed, each agent is asked. If one does not answer or
 *   refuses (the device still holds another tenant's data, or is being
 *   cleaned), what this request bound is undone: nothing stays bound and the
 *   devices go through the release path — a cleanup, since the agent may have
 *   recorded the binding before its answer was lost (invariant 2). The caller
 *   gets UNAVAILABLE or FAILED_PRECONDITION naming the device and why.
 * - A live migration's destination devices are recorded the same way by the
 *   destination agent before the plan is acknowledged (`record`, ./migration.ts).
 */
import type { Logger } from 'pino';
import { relayedReason } from '../../../error-reasons.js';
import { BerthError, failedPrecondition } from '../../../errors.js';
import type { Arq, ArqBinding, BindGate, BindResult, ClaimJudge } from '../domain/arq.js';
import { type DeviceRecord, recordedByAgent } from '../domain/device-state.js';
import type { HostRecord } from '../domain/host.js';
import type { UseCases } from '../usecases/use-cases.js';
import { type AgentHandle, type AgentPort, type AgentView, BINDING_FEATURE } from './agent-port.js';

/** The feature an agent advertises when it records bindings. */

export interface BindingDeps {
  useCases: UseCases;
  agents: AgentPort;
  /**
   * This scheduler's id and whether it is alone on its database: how a Cyborg
   * bind's claim on an ARQ is judged, which refuses any other bind of it
   * (gRPC's) while it runs (ARQ_BIND_RUNNING, docs/decisions.md 89).
   */
  judge: ClaimJudge;
  logger: Logger;
}

export class Binding {
  constructor(private readonly deps: BindingDeps) {}

  /**
   * The gate of a bind, judged in its unit from a host's row as the unit
   * locked it: whether the host's agent can record a binding now (followed
   * here: the link says; on a shared database, another scheduler's agent is
   * judged by what its follower wrote in the row). Pure: it makes no client
   * (`AgentPort.view`). A stale word is safe: RecordBinding after the commit is
   * what proves the agent is there.
   */
  private readonly gate: BindGate = (host) => agentRefusal(this.deps.agents.view(host), host.name);

  /**
   * BindAcceleratorRequests: binds every ARQ (all or nothing), then has each
   * device's agent record the binding; acknowledged only once they all did.
   * `project`: the Keystone project that owns the instance (the Cyborg API's
   * ARQs), which the agent records and the erasure certificate names; ''
   * over gRPC, whose callers are Berth principals, not projects.
   */
  async bind(bindings: ArqBinding[], subject?: string, project = ''): Promise<Arq[]> {
    let result: BindResult;
    try {
      // The principal that first binds ARQs to an instance owns it, recorded by
      // the bind's unit: it may read the instance's erasure certificates
      // (app/certificates.ts); a bind that fails leaves no owner (decision 95).
      result = await this.deps.useCases.bindArqs(bindings, undefined, this.gate, this.deps.judge, subject);
    } catch (err) {
      await this.deps.useCases.recordBindFailure(bindings, err);
      throw err;
    }
    await this.confirm(bindings, result, project);
    return result.arqs;
  }

  /**
   * Asks each device's agent to record the binding; if any did not, undoes what
   * this request bound and throws. ARQs that were already bound (a retried
   * request, acknowledged before) are asked again but never undone.
   */
  private async confirm(bindings: ArqBinding[], result: BindResult, project: string): Promise<void> {
    const errors = await Promise.all(
      result.devices.map((d, i) =>
        recordedByAgent(d)
          ? this.record(
              d,
              result.arqs[i]!.uuid,
              d.instanceUuid ?? '',
              'nothing is bound',
              project,
              result.hosts.get(d.host),
            )
          : Promise.resolve(null),
      ),
    );
    const failed = errors.find((e): e is BerthError => e !== null);
    if (!failed) return;
    const fresh = new Set(result.newlyBound);
    // The released devices' cleanups are dispatched once this commits (the use cases' change feed).
    const released = await this.deps.useCases.revertUnconfirmedBind(
      bindings.filter((b) => fresh.has(b.arqUuid)),
      failed.message,
    );
    this.deps.logger.warn(
      { err: failed.message, devices: released.map((d) => `${d.host}/${d.address}`) },
      'bind undone: an agent did not record it',
    );
    throw failed;
  }

  /**
   * Asks `d`'s agent to record that it is handed to `instanceUuid` for `arqUuid`
   * (of `project`, '' when none is known), reached from `host`, the host's
   * record as the bind's unit read it, or (none: a retried bind, a
   * migration's destination) as the directory reads it now;
   * the error to return (its message starting with `undone`, what the caller
   * undoes) when the agent is not there, cannot, or refuses; null once recorded.
   */
  async record(
    d: DeviceRecord,
    arqUuid: string,
    instanceUuid: string,
    undone: string,
    project: string,
    host?: HostRecord,
  ): Promise<BerthError | null> {
    const where = `device ${d.address} on host ${d.host}`;
    const { agents } = this.deps;
    let agent: AgentHandle | undefined;
    let unread: BerthError | null = null;
    if (host) {
      agent = agents.observe(host);
    } else {
      unread = await agents.refresh([d.host]).then(
        () => null,
        (err: unknown) => BerthError.from(err),
      );
      agent = agents.get(d.host);
    }
    const refusal = unread ?? agentRefusal(agent, d.host);
    if (refusal) return new BerthError(refusal.code, `${undone}: ${refusal.message}`, refusal);
    try {
      await agent!.recordBinding(d.address, arqUuid, instanceUuid, project);
      return null;
    } catch (err) {
      const e = this.deps.agents.failure(err);
      if (e.unreachable) {
        return new BerthError(
          'UNAVAILABLE',
          `${undone}: the agent of host ${d.host} did not confirm it recorded the binding of ${where} (${e.message}); it is cleaned before it is offered again`,
          { reason: 'AGENT_UNAVAILABLE', metadata: { host: d.host, address: d.address } },
        );
      }
      return failedPrecondition(
        relayedReason('FAILED_PRECONDITION', e.reason, 'AGENT_REFUSED_BINDING'),
        `${undone}: the agent of host ${d.host} refused to record the binding of ${where}: ${e.message}; it is cleaned before it is offered again`,
        { host: d.host, address: d.address },
      );
    }
  }
}

/** Why `agent` (host `host`'s) cannot record a binding now, or null; no agent known is refused too. */
function agentRefusal(agent: AgentView | undefined, host: string): BerthError | null {
  if (!agent?.isConnected) {
    return new BerthError(
      'UNAVAILABLE',
      `the agent of host ${host} is not connected, so it cannot record a binding of a device that is cleaned; retry when it is back`,
      { reason: 'AGENT_UNAVAILABLE', metadata: { host } },
    );
  }
  if (!agent.has(BINDING_FEATURE)) {
    return failedPrecondition(
      'AGENT_CANNOT_RECORD_BINDINGS',
      `the agent of host ${host} is too old to record bindings (no ${BINDING_FEATURE}); upgrade it before binding devices that are cleaned`,
      { host },
    );
  }
  return null;
}
