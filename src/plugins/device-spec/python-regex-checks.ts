/**
 * The checks the Python `re` translator makes on a parsed pattern (sre_compile's,
 * and those for what JavaScript cannot say with Python's meaning): look-behind
 * width, references to groups, possessive repeats, case-insensitivity scopes.
 */
import {
  F_IGNORECASE,
  F_TEMPLATE,
  type Node,
  PythonReError,
  type Seq,
  type State,
  TYPE_FLAGS,
  width,
} from './python-regex-syntax.js';

/** sre_compile._combine_flags. */
export function combineFlags(flags: number, add: number, del: number): number {
  const base = add & TYPE_FLAGS ? flags & ~TYPE_FLAGS : flags;
  return (base | add) & ~del;
}

/** The checks sre_compile makes after parsing (look-behind width, the TEMPLATE flag). */
export function compileChecks(seq: Seq, flags: number, st: State): void {
  for (const node of seq.items) {
    switch (node.t) {
      case 'repeat':
        if (flags & F_TEMPLATE) {
          const op = { greedy: 'MAX_REPEAT', lazy: 'MIN_REPEAT', possessive: 'POSSESSIVE_REPEAT' }[node.kind];
          throw new PythonReError(`internal: unsupported template operator ${op}`, null);
        }
        compileChecks(node.body, flags, st);
        break;
      case 'group':
        compileChecks(node.body, combineFlags(flags, node.add, node.del), st);
        break;
      case 'atomic':
        compileChecks(node.body, flags, st);
        break;
      case 'assert':
        if (node.behind) {
          const [lo, hi] = width(node.body, st);
          if (lo !== hi) throw new PythonReError('look-behind requires fixed-width pattern', null);
        }
        compileChecks(node.body, flags, st);
        break;
      case 'branch':
        for (const alt of node.alts) compileChecks(alt, flags, st);
        break;
      case 'cond':
        compileChecks(node.yes, flags, st);
        if (node.no) compileChecks(node.no, flags, st);
        break;
      default:
        break;
    }
  }
}

/** Where a node sits: the sequence, its index there, and the node whose body that sequence is (null: the pattern). */
interface Frame {
  seq: Seq;
  index: number;
  via: Node | null;
}

/**
 * Backreferences that JavaScript would not treat as Python does. Python fails
 * a reference to a group that has not matched; JavaScript matches the empty
 * string there, and also forgets a group's value at each turn of a loop and
 * matches look-behinds from right to left. A reference is translated only when
 * its group has certainly matched, with its final value, whenever the
 * reference is tried: the group comes earlier in a sequence enclosing the
 * reference, reached through plain groups, atomic groups and positive
 * look-aheads only (no alternative, loop, negative or look-behind assertion).
 */
export function checkReferences(root: Seq, st: State): void {
  const groupPaths = new Map<number, Frame[]>();
  const refs: { node: Node & { t: 'ref' }; path: Frame[] }[] = [];
  const walk = (seq: Seq, via: Node | null, path: Frame[]) => {
    seq.items.forEach((node, index) => {
      const here = [...path, { seq, index, via }];
      switch (node.t) {
        case 'group':
          if (node.group !== null) groupPaths.set(node.group, here);
          walk(node.body, node, here);
          break;
        case 'repeat':
        case 'atomic':
        case 'assert':
          walk(node.body, node, here);
          break;
        case 'branch':
          for (const alt of node.alts) walk(alt, node, here);
          break;
        case 'cond':
          walk(node.yes, node, here);
          if (node.no) walk(node.no, node, here);
          break;
        case 'ref':
          refs.push({ node, path: here });
          break;
        default:
          break;
      }
    });
  };
  walk(root, null, []);
  for (const { node, path } of refs) {
    const groupPath = groupPaths.get(node.group)!;
    let k = 0;
    while (
      k < groupPath.length &&
      k < path.length &&
      groupPath[k]!.seq === path[k]!.seq &&
      groupPath[k]!.index === path[k]!.index
    ) {
      k++;
    }
    const same = k < groupPath.length && k < path.length && groupPath[k]!.seq === path[k]!.seq;
    let safe = same && groupPath[k]!.index < path[k]!.index;
    for (let j = k + 1; safe && j < groupPath.length; j++) {
      const via = groupPath[j]!.via!;
      safe = via.t === 'group' || via.t === 'atomic' || (via.t === 'assert' && !via.behind && !via.negate);
    }
    if (!safe) {
      st.noteUnsupported(
        `a reference to group ${node.group} where that group may not have matched (Python then fails to match; JavaScript would match the empty string)`,
        node.pos,
      );
    }
  }
}

/**
 * Possessive quantifiers over more than one character unit. Python 3.11.0 to
 * 3.11.4 (Debian 12 has 3.11.2) match some of them wrongly (CPython issues
 * gh-100061 and gh-106052: a sub-pattern that backtracks, a negative
 * look-ahead inside); later releases match them as the atomic group they stand
 * for. Their meaning depends on the Python release Nova runs on, so only the
 * simple form (`0*+`, `[0-3]++`: one character class repeated, a separate
 * opcode in sre, unaffected) is translated.
 */
export function checkPossessive(seq: Seq, st: State): void {
  for (const node of seq.items) {
    if (node.t === 'repeat') {
      const only = node.body.items.length === 1 ? node.body.items[0]! : null;
      const simple = only !== null && (only.t === 'lit' || only.t === 'set' || only.t === 'any');
      if (node.kind === 'possessive' && !simple) {
        st.noteUnsupported(
          'a possessive quantifier (*+, ++, ?+, {m,n}+) over more than one character, which Python 3.11.0 to 3.11.4 (Debian 12) match wrongly in some cases (CPython gh-100061, gh-106052); write an atomic group (?>…*) instead',
          node.pos,
        );
      }
      checkPossessive(node.body, st);
    } else if (node.t === 'group' || node.t === 'atomic' || node.t === 'assert') {
      checkPossessive(node.body, st);
    } else if (node.t === 'branch') {
      for (const alt of node.alts) checkPossessive(alt, st);
    } else if (node.t === 'cond') {
      checkPossessive(node.yes, st);
      if (node.no) checkPossessive(node.no, st);
    }
  }
}

/** Case-insensitivity must be the same for the whole pattern: JavaScript (Node 20) has no scoped flags. */
export function checkCaseScopes(seq: Seq, flags: number, globalFlags: number, st: State): void {
  for (const node of seq.items) {
    if (node.t === 'group') {
      const inner = combineFlags(flags, node.add, node.del);
      if ((inner & F_IGNORECASE) !== (globalFlags & F_IGNORECASE)) {
        st.noteUnsupported(
          `a case-insensitivity scope (?${inner & F_IGNORECASE ? 'i' : '-i'}:…) that differs from the whole pattern's (write (?i) at the start to apply it to all of it)`,
          node.pos,
        );
      }
      checkCaseScopes(node.body, inner, globalFlags, st);
    } else if (node.t === 'repeat' || node.t === 'atomic' || node.t === 'assert') {
      checkCaseScopes(node.body, flags, globalFlags, st);
    } else if (node.t === 'branch') {
      for (const alt of node.alts) checkCaseScopes(alt, flags, globalFlags, st);
    } else if (node.t === 'cond') {
      checkCaseScopes(node.yes, flags, globalFlags, st);
      if (node.no) checkCaseScopes(node.no, flags, globalFlags, st);
    }
  }
}
