/**
 * Python 3.11's `re/_parser.py`, rewritten: a pattern into the parse tree of
 * python-regex-syntax.ts, refusing what Python refuses with its message and
 * position (python-regex.ts says why and what is translated).
 */

import {
  ANCHORS,
  ASCIILETTERS,
  CATEGORIES,
  checkGroupName,
  codePoints,
  cpLength,
  cpOf,
  DIGITS,
  ESCAPES,
  F_VERBOSE,
  FLAGS,
  GLOBAL_FLAGS,
  HEXDIGITS,
  IDENTIFIER,
  MAXGROUPS,
  MAXREPEAT,
  type Node,
  OCTDIGITS,
  PythonReError,
  REPEAT_CHARS,
  repr,
  type Seq,
  type SetItem,
  type Source,
  SPECIAL_CHARS,
  type State,
  TYPE_FLAGS,
  WHITESPACE,
} from './python-regex-syntax.js';
import { pythonDecimal } from './python-values.js';

const lit = (cp: number): { t: 'lit'; cp: number; named?: true } => ({ t: 'lit', cp });

/** `\x..`, `\u....`, `\U........` and `\N{…}`, shared by both escape readers; null when `token` is none of them. */
function numericEscape(src: Source, token: string, st: State): { t: 'lit'; cp: number; named?: true } | null {
  const c = codePoints(token)[1];
  const digits = (n: number) => {
    const full = token + src.getwhile(n, HEXDIGITS);
    if (cpLength(full) !== n + 2) throw src.error(`incomplete escape ${full}`, cpLength(full));
    const value = Number.parseInt(full.slice(2), 16);
    if (value > 0x10ffff) throw src.error(`bad escape ${full}`, cpLength(full));
    return lit(value);
  };
  if (c === 'x') return digits(2);
  if (c === 'u') return digits(4);
  if (c === 'U') return digits(8);
  if (c === 'N') {
    const start = src.tell() - 2;
    if (!src.match('{')) throw src.error('missing {');
    const name = src.getuntil('}', 'character name');
    // Python looks the name up in its Unicode database, which JavaScript does not have.
    st.noteUnsupported(`the named character \\N{${name}}`, start);
    return { t: 'lit', cp: 0xfffd, named: true };
  }
  return null;
}

/** sre_parse._class_escape: an escape inside [...]. */
function classEscape(src: Source, token: string, st: State): SetItem {
  const code = ESCAPES.get(token);
  if (code !== undefined) return lit(code);
  const cat = CATEGORIES.get(token);
  if (cat !== undefined) return { t: 'cat', cat };
  const numeric = numericEscape(src, token, st);
  if (numeric) return numeric;
  const c = codePoints(token)[1]!;
  if (OCTDIGITS.has(c)) {
    const full = token + src.getwhile(2, OCTDIGITS);
    const value = Number.parseInt(full.slice(1), 8);
    if (value > 0o377) {
      throw src.error(`octal token value ${full} outside of range 0-0o377`, cpLength(full));
    }
    return lit(value);
  }
  if (DIGITS.has(c)) throw src.error(`bad escape ${token}`, cpLength(token));
  if (ASCIILETTERS.has(c)) throw src.error(`bad escape ${token}`, cpLength(token));
  return lit(cpOf(c));
}

/** sre_parse._escape: an escape outside [...]. */
function escapeNode(src: Source, token: string, st: State): Node {
  const at = ANCHORS.get(token);
  if (at !== undefined) return { t: 'at', at };
  const cat = CATEGORIES.get(token);
  if (cat !== undefined) return { t: 'set', negate: false, items: [{ t: 'cat', cat }] };
  const code = ESCAPES.get(token);
  if (code !== undefined) return lit(code);
  const numeric = numericEscape(src, token, st);
  if (numeric) return numeric;
  const c = codePoints(token)[1]!;
  if (c === '0') {
    const full = token + src.getwhile(2, OCTDIGITS);
    return lit(Number.parseInt(full.slice(1), 8));
  }
  if (DIGITS.has(c)) {
    const position = src.tell() - 2;
    let full = token;
    if (src.next !== null && DIGITS.has(src.next)) {
      full += src.get();
      if (
        OCTDIGITS.has(full[1]!) &&
        OCTDIGITS.has(full[2]!) &&
        src.next !== null &&
        OCTDIGITS.has(src.next)
      ) {
        full += src.get();
        const value = Number.parseInt(full.slice(1), 8);
        if (value > 0o377) {
          throw src.error(`octal token value ${full} outside of range 0-0o377`, full.length);
        }
        return lit(value);
      }
    }
    const group = Number(full.slice(1));
    if (group < st.groups) {
      if (!st.checkgroup(group)) throw src.error('cannot refer to an open group', full.length);
      st.checklookbehindgroup(group, src);
      return { t: 'ref', group, pos: position };
    }
    throw src.error(`invalid group reference ${group}`, full.length - 1);
  }
  if (ASCIILETTERS.has(c)) throw src.error(`bad escape ${token}`, cpLength(token));
  return lit(cpOf(c));
}

function parseFlags(src: Source, st: State, first: string): [number, number] | null {
  let char: string | null = first;
  let add = 0;
  let del = 0;
  const isAlpha = (c: string) => /^\p{L}$/u.test(c);
  if (char !== '-') {
    for (;;) {
      const flag = FLAGS.get(char)!;
      if (char === 'L') throw src.error("bad inline flags: cannot use 'L' flag with a str pattern");
      add |= flag;
      if (flag & TYPE_FLAGS && (add & TYPE_FLAGS) !== flag) {
        throw src.error("bad inline flags: flags 'a', 'u' and 'L' are incompatible");
      }
      char = src.get();
      if (char === null) throw src.error('missing -, : or )');
      if (char === ')' || char === '-' || char === ':') break;
      if (!FLAGS.has(char))
        throw src.error(isAlpha(char) ? 'unknown flag' : 'missing -, : or )', cpLength(char));
    }
  }
  if (char === ')') {
    st.flags |= add;
    return null;
  }
  if (add & GLOBAL_FLAGS) throw src.error('bad inline flags: cannot turn on global flag', 1);
  if (char === '-') {
    char = src.get();
    if (char === null) throw src.error('missing flag');
    if (!FLAGS.has(char)) throw src.error(isAlpha(char) ? 'unknown flag' : 'missing flag', cpLength(char));
    for (;;) {
      const flag = FLAGS.get(char)!;
      if (flag & TYPE_FLAGS) throw src.error("bad inline flags: cannot turn off flags 'a', 'u' and 'L'");
      del |= flag;
      char = src.get();
      if (char === null) throw src.error('missing :');
      if (char === ':') break;
      if (!FLAGS.has(char)) throw src.error(isAlpha(char) ? 'unknown flag' : 'missing :', cpLength(char));
    }
  }
  if (del & GLOBAL_FLAGS) throw src.error('bad inline flags: cannot turn off global flag', 1);
  if (add & del) throw src.error('bad inline flags: flag turned on and off', 1);
  return [add, del];
}

export function parseSub(src: Source, st: State, verbose: boolean, nested: number): Seq {
  const items: Seq[] = [];
  for (;;) {
    items.push(parse(src, st, verbose, nested + 1, nested === 0 && items.length === 0));
    if (!src.match('|')) break;
    if (!nested) verbose = (st.flags & F_VERBOSE) !== 0;
  }
  if (items.length === 1) return items[0]!;
  return { items: [{ t: 'branch', alts: items }] };
}

function parseClass(src: Source, st: State): Node {
  const here = src.tell() - 1;
  const set: SetItem[] = [];
  const negate = src.match('^');
  for (;;) {
    const token = src.get();
    if (token === null) throw src.error('unterminated character set', src.tell() - here);
    if (token === ']' && set.length > 0) break;
    const code1: SetItem = token[0] === '\\' ? classEscape(src, token, st) : lit(cpOf(token));
    if (src.match('-')) {
      const that = src.get();
      if (that === null) throw src.error('unterminated character set', src.tell() - here);
      if (that === ']') {
        set.push(code1, lit(0x2d));
        break;
      }
      const code2: SetItem = that[0] === '\\' ? classEscape(src, that, st) : lit(cpOf(that));
      const bad = () =>
        src.error(`bad character range ${token}-${that}`, cpLength(token) + 1 + cpLength(that));
      if (code1.t !== 'lit' || code2.t !== 'lit') throw bad();
      // A \N{…} end is unknown here; the pattern is refused for it anyway.
      if (code2.cp < code1.cp && !code1.named && !code2.named) throw bad();
      set.push({ t: 'range', lo: code1.cp, hi: code2.cp });
    } else {
      set.push(code1);
    }
  }
  return { t: 'set', negate, items: set };
}

function parseRepeat(src: Source, token: string, sub: Node[]): 'literal' | 'done' {
  const here = src.tell();
  let min: bigint;
  let max: bigint;
  if (token === '?') [min, max] = [0n, 1n];
  else if (token === '*') [min, max] = [0n, MAXREPEAT];
  else if (token === '+') [min, max] = [1n, MAXREPEAT];
  else {
    if (src.next === '}') return 'literal';
    [min, max] = [0n, MAXREPEAT];
    let lo = '';
    let hi = '';
    while (src.next !== null && DIGITS.has(src.next)) lo += src.get();
    if (src.match(',')) {
      while (src.next !== null && DIGITS.has(src.next)) hi += src.get();
    } else {
      hi = lo;
    }
    if (!src.match('}')) {
      src.seek(here);
      return 'literal';
    }
    if (lo) {
      min = BigInt(lo);
      if (min >= MAXREPEAT) throw new PythonReError('the repetition number is too large', null);
    }
    if (hi) {
      max = BigInt(hi);
      if (max >= MAXREPEAT) throw new PythonReError('the repetition number is too large', null);
      if (max < min) throw src.error('min repeat greater than max repeat', src.tell() - here);
    }
  }
  const item = sub.length > 0 ? sub[sub.length - 1]! : null;
  if (item === null || item.t === 'at') {
    throw src.error('nothing to repeat', src.tell() - here + cpLength(token));
  }
  if (item.t === 'repeat') throw src.error('multiple repeat', src.tell() - here + cpLength(token));
  const body: Seq =
    item.t === 'group' && item.group === null && item.add === 0 && item.del === 0
      ? item.body
      : { items: [item] };
  const kind = src.match('?') ? 'lazy' : src.match('+') ? 'possessive' : 'greedy';
  sub[sub.length - 1] = { t: 'repeat', min, max, kind, body, pos: here - 1 };
  return 'done';
}

function parse(src: Source, st: State, verboseIn: boolean, nested: number, first = false): Seq {
  let verbose = verboseIn;
  const sub: Node[] = [];
  for (;;) {
    const token = src.next;
    if (token === null || token === '|' || token === ')') break;
    src.get();
    if (verbose) {
      if (WHITESPACE.has(token)) continue;
      if (token === '#') {
        for (;;) {
          const c = src.get();
          if (c === null || c === '\n') break;
        }
        continue;
      }
    }
    if (token[0] === '\\') {
      sub.push(escapeNode(src, token, st));
    } else if (!SPECIAL_CHARS.has(token)) {
      sub.push(lit(cpOf(token)));
    } else if (token === '[') {
      sub.push(parseClass(src, st));
    } else if (REPEAT_CHARS.has(token)) {
      if (parseRepeat(src, token, sub) === 'literal') sub.push(lit(cpOf(token)));
    } else if (token === '.') {
      sub.push({ t: 'any' });
    } else if (token === '(') {
      const node = parseGroup(src, st, verbose, nested, first, sub.length > 0);
      if (node === 'global-flags') verbose = (st.flags & F_VERBOSE) !== 0;
      else if (node !== null) sub.push(node);
    } else if (token === '^') {
      sub.push({ t: 'at', at: 'beginning' });
    } else if (token === '$') {
      sub.push({ t: 'at', at: 'end' });
    }
  }
  return { items: sub };
}

/** After `(`: a group, an extension, a comment (null) or global flags. */
function parseGroup(
  src: Source,
  st: State,
  verbose: boolean,
  nested: number,
  first: boolean,
  hasItems: boolean,
): Node | null | 'global-flags' {
  const start = src.tell() - 1;
  let capture = true;
  let atomic = false;
  let name: string | null = null;
  let add = 0;
  let del = 0;
  if (src.match('?')) {
    const char = src.get();
    if (char === null) throw src.error('unexpected end of pattern');
    if (char === 'P') {
      if (src.match('<')) {
        name = src.getuntil('>', 'group name');
        checkGroupName(src, name, 1);
      } else if (src.match('=')) {
        const refName = src.getuntil(')', 'group name');
        checkGroupName(src, refName, 1);
        const gid = st.groupdict.get(refName);
        if (gid === undefined) throw src.error(`unknown group name ${repr(refName)}`, cpLength(refName) + 1);
        if (!st.checkgroup(gid)) throw src.error('cannot refer to an open group', cpLength(refName) + 1);
        st.checklookbehindgroup(gid, src);
        return { t: 'ref', group: gid, pos: start };
      } else {
        const c = src.get();
        if (c === null) throw src.error('unexpected end of pattern');
        throw src.error(`unknown extension ?P${c}`, cpLength(c) + 2);
      }
    } else if (char === ':') {
      capture = false;
    } else if (char === '#') {
      for (;;) {
        if (src.next === null) throw src.error('missing ), unterminated comment', src.tell() - start);
        if (src.get() === ')') break;
      }
      return null;
    } else if (char === '=' || char === '!' || char === '<') {
      let kind: string = char;
      let behind = false;
      let outer: number | null = null;
      if (kind === '<') {
        const c = src.get();
        if (c === null) throw src.error('unexpected end of pattern');
        if (c !== '=' && c !== '!') throw src.error(`unknown extension ?<${c}`, cpLength(c) + 2);
        kind = c;
        behind = true;
        outer = st.lookbehindgroups;
        if (outer === null) st.lookbehindgroups = st.groups;
      }
      const p = parseSub(src, st, verbose, nested + 1);
      if (behind && outer === null) st.lookbehindgroups = null;
      if (!src.match(')')) throw src.error('missing ), unterminated subpattern', src.tell() - start);
      return { t: 'assert', behind, negate: kind === '!', body: p };
    } else if (char === '(') {
      return parseConditional(src, st, verbose, nested, start);
    } else if (char === '>') {
      capture = false;
      atomic = true;
    } else if (FLAGS.has(char) || char === '-') {
      const flags = parseFlags(src, st, char);
      if (flags === null) {
        if (!first || hasItems) {
          throw src.error('global flags not at the start of the expression', src.tell() - start);
        }
        return 'global-flags';
      }
      [add, del] = flags;
      capture = false;
    } else {
      throw src.error(`unknown extension ?${char}`, cpLength(char) + 1);
    }
  }
  let group: number | null = null;
  if (capture) {
    try {
      group = st.opengroup(name);
    } catch (error) {
      throw src.error((error as Error).message, cpLength(name ?? '') + 1);
    }
  }
  const subVerbose = (verbose || (add & F_VERBOSE) !== 0) && (del & F_VERBOSE) === 0;
  const p = parseSub(src, st, subVerbose, nested + 1);
  if (!src.match(')')) throw src.error('missing ), unterminated subpattern', src.tell() - start);
  if (group !== null) st.closegroup(group, p);
  if (atomic) return { t: 'atomic', body: p };
  return { t: 'group', group, add, del, body: p, pos: start };
}

function parseConditional(src: Source, st: State, verbose: boolean, nested: number, start: number): Node {
  const condname = src.getuntil(')', 'group name');
  let condgroup: number;
  const length = cpLength(condname) + 1;
  if (IDENTIFIER.test(condname)) {
    const gid = st.groupdict.get(condname);
    if (gid === undefined) throw src.error(`unknown group name ${repr(condname)}`, length);
    condgroup = gid;
  } else {
    const value = pythonDecimal(condname);
    if (value === null || value < 0n)
      throw src.error(`bad character in group name ${repr(condname)}`, length);
    if (value === 0n) throw src.error('bad group number', length);
    if (value >= BigInt(MAXGROUPS)) throw src.error(`invalid group reference ${value}`, length);
    condgroup = Number(value);
    if (!st.grouprefpos.has(condgroup)) st.grouprefpos.set(condgroup, src.tell() - length);
  }
  st.checklookbehindgroup(condgroup, src);
  const yes = parse(src, st, verbose, nested + 1);
  let no: Seq | null = null;
  if (src.match('|')) {
    no = parse(src, st, verbose, nested + 1);
    if (src.next === '|') throw src.error('conditional backref with more than two branches');
  }
  if (!src.match(')')) throw src.error('missing ), unterminated subpattern', src.tell() - start);
  st.noteUnsupported('a conditional group (?(…)…|…)', start);
  return { t: 'cond', group: condgroup, yes, no, pos: start };
}
