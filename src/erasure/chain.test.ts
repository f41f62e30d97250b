import { describe, expect, it } from 'vitest';
import { chainPosition, chainViews, linkView, linkViewLines } from './chain.js';

const M = 'nvme:nqn.moved';
const h = (c: string) => `sha256:${c.repeat(64)}`;

describe('one chain per media, across hosts (decision 63)', () => {
  it("continues the link the dispatch states, whichever host signed it, whatever the agent's own journal holds", () => {
    // Host A holds an old link of its own (seq 1); the media was cleaned on B since (seq 2).
    const own = [{ hash: h('a'), seq: 1, prev: null }];
    expect(chainPosition(M, { mediaKey: M, hash: h('b'), seq: 2, host: 'hostb' }, own)).toEqual({
      seq: 3,
      prev: h('b'),
      continues: 'scheduler',
    });
    // The agent's own newest is a fork that does not descend from the stated link: the stated link decides.
    const fork = [
      { hash: h('a'), seq: 1, prev: null },
      { hash: h('c'), seq: 2, prev: h('a') },
      { hash: h('d'), seq: 3, prev: h('c') },
    ];
    expect(chainPosition(M, { mediaKey: M, hash: h('b'), seq: 2, host: 'hostb' }, fork)).toMatchObject({
      seq: 3,
      prev: h('b'),
      continues: 'scheduler',
    });
  });

  it("a restored database states an older link of the agent's own chain: the agent's later links are continued", () => {
    const own = [
      { hash: h('a'), seq: 1, prev: null },
      { hash: h('c'), seq: 2, prev: h('a') },
      { hash: h('d'), seq: 3, prev: h('c') },
    ];
    expect(chainPosition(M, { mediaKey: M, hash: h('a'), seq: 1, host: 'hosta' }, own)).toEqual({
      seq: 4,
      prev: h('d'),
      continues: 'agent',
    });
    // Stating the agent's newest itself: the scheduler's word.
    expect(chainPosition(M, { mediaKey: M, hash: h('d'), seq: 3, host: 'hosta' }, own).continues).toBe(
      'scheduler',
    );
  });

  it("no stated link: the agent's own last link, else an unknown-history link (never a silent first link)", () => {
    expect(chainPosition(M, null, [{ hash: h('a'), seq: 4, prev: h('e') }])).toEqual({
      seq: 5,
      prev: h('a'),
      continues: 'agent',
    });
    expect(chainPosition(M, null, [])).toEqual({
      seq: 1,
      prev: null,
      history: 'unknown',
      continues: 'nothing',
    });
    // A link of another media is no history of this one.
    expect(
      chainPosition(M, { mediaKey: 'nvme:other', hash: h('b'), seq: 7, host: 'hostb' }, []),
    ).toMatchObject({
      prev: null,
      history: 'unknown',
    });
  });

  it('a verifier sees each handover and each gap', () => {
    expect(linkView({ host: 'hosta', prev: h('b') }, { host: 'hostb' })).toEqual({
      handover: { from: 'hostb', to: 'hosta' },
      gap: false,
    });
    expect(linkView({ host: 'hosta', prev: h('b') }, { host: 'hosta' })).toEqual({
      handover: null,
      gap: false,
    });
    expect(linkViewLines(linkView({ host: 'hosta', prev: null }, null))).toEqual([
      'gap: unknown history before this link',
    ]);
    const views = chainViews([
      { hash: h('1'), claims: { host: 'hostb', prev: null } },
      { hash: h('2'), claims: { host: 'hosta', prev: h('1') } },
      { hash: h('3'), claims: { host: 'hosta', prev: h('2') } },
      // Its previous link is not in the list: neither a handover nor a gap is claimed.
      { hash: h('5'), claims: { host: 'hostc', prev: h('4') } },
    ]).map(linkViewLines);
    expect(views).toEqual([['gap: unknown history before this link'], ['handover: hostb -> hosta'], [], []]);
  });
});
