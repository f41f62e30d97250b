/**
 * Python `re` regular expressions for the object form of a device_spec
 * `address`, translated to JavaScript RegExps with the same meaning.
 *
 * Nova compiles each field of `{"domain", "bus", "slot", "function"}` with
 * Python's `re.compile` and tests it with `re.match` (anchored at the start of
 * the field only). JavaScript's RegExp has another syntax (`\Z`, `(?P<n>…)`,
 * `{,n}`, `(?i)`, `[]…]` mean something else there, or nothing) and other
 * semantics (`$`, `\s`, `\d`, `\w`, `\b` differ), so a pattern is never handed
 * to RegExp as it is. Instead:
 *
 * 1. The pattern is parsed with Python 3.11's grammar (Debian 12's; the grammar
 *    of `re/_parser.py`, rewritten here), including its checks: a pattern
 *    Python refuses is refused with Python's own message and position.
 * 2. The constructs that JavaScript cannot express with exactly Python's
 *    meaning are refused by name (UNSUPPORTED below): `\N{…}` names,
 *    conditionals `(?(1)…)`, a case-insensitivity scope `(?i:…)` that differs
 *    from the whole pattern's, and a backreference to a group that may not have
 *    matched when it is used (Python then fails, JavaScript matches empty).
 * 3. Everything else is emitted from the parse tree as a JavaScript pattern
 *    (`u` flag: code points, like Python's str patterns; not `v`, which
 *    Node 20's V8 gets wrong in places) that spells out
 *    Python's meaning: `$` as `(?=\n?$)`, `\s` as Python's whitespace set,
 *    `\d`/`\w` as Unicode categories, `\b` by lookarounds, `.` as `[^\n]`,
 *    atomic groups and possessive quantifiers as a lookahead capture and a
 *    backreference, groups renamed so numbering cannot drift.
 *
 * The grammar is closed: every character of a pattern is consumed by a rule
 * above, so nothing passes through untranslated. test/e2e/nova-devspec.test.ts
 * checks acceptance and matching against Python's `re` on generated patterns.
 * Case-insensitive matching (`(?i)`) uses JavaScript's Unicode case folding
 * plus Python's equivalence of i, I, İ and ı; both agree on every ASCII
 * character, hence on every PCI address field. Unicode categories (`\d`, `\w`)
 * follow Node's tables (Python 3.11 has Unicode 14): characters added since can
 * differ, none of them in a PCI address.
 */

import {
  checkCaseScopes,
  checkPossessive,
  checkReferences,
  combineFlags,
  compileChecks,
} from './python-regex-checks.js';
import { parseSub } from './python-regex-parser.js';
import {
  type Category,
  F_ASCII,
  F_DOTALL,
  F_IGNORECASE,
  F_MULTILINE,
  F_UNICODE,
  MAXREPEAT,
  type Node,
  PythonReError,
  type Seq,
  type SetItem,
  Source,
  State,
} from './python-regex-syntax.js';

// --- emission ---------------------------------------------------------------

type Ranges = [number, number][];

/** Python's str.isspace() set (sre's Unicode \s). */
const UNICODE_SPACE: Ranges = [
  [0x09, 0x0d],
  [0x1c, 0x20],
  [0x85, 0x85],
  [0xa0, 0xa0],
  [0x1680, 0x1680],
  [0x2000, 0x200a],
  [0x2028, 0x2029],
  [0x202f, 0x202f],
  [0x205f, 0x205f],
  [0x3000, 0x3000],
];
const ASCII_SPACE: Ranges = [
  [0x09, 0x0d],
  [0x20, 0x20],
];
const ASCII_DIGIT: Ranges = [[0x30, 0x39]];
const ASCII_WORD: Ranges = [
  [0x30, 0x39],
  [0x41, 0x5a],
  [0x5f, 0x5f],
  [0x61, 0x7a],
];
/** Python's Unicode \w: str.isalnum() or "_" (letters and numbers). */
const UNICODE_WORD = '\\p{L}\\p{N}_';
/** The code points Python's case-insensitive matching treats as one letter (lower() and re._casefix), where JavaScript's folding does not. */
const DOTTED_I = [0x49, 0x69, 0x130, 0x131];

const char = (cp: number) =>
  (cp >= 0x30 && cp <= 0x39) || (cp >= 0x41 && cp <= 0x5a) || (cp >= 0x61 && cp <= 0x7a)
    ? String.fromCodePoint(cp)
    : `\\u{${cp.toString(16)}}`;

const rangeText = (ranges: Ranges) =>
  ranges.map(([lo, hi]) => (lo === hi ? char(lo) : `${char(lo)}-${char(hi)}`)).join('');

/** Every code point not in `ranges` (sorted, disjoint). */
function complement(ranges: Ranges): Ranges {
  const out: Ranges = [];
  let next = 0;
  for (const [lo, hi] of ranges) {
    if (lo > next) out.push([next, lo - 1]);
    next = hi + 1;
  }
  if (next <= 0x10ffff) out.push([next, 0x10ffff]);
  return out;
}

/**
 * A category as the content of a character class (the `u` flag has no nested
 * classes, so a complement is spelt out as ranges); null for Unicode \W, the
 * complement of a union of properties, which only a look-ahead can say.
 */
function categoryItems(cat: Category, ascii: boolean): string | null {
  switch (cat) {
    case 'digit':
      return ascii ? rangeText(ASCII_DIGIT) : '\\p{Nd}';
    case 'not_digit':
      return ascii ? rangeText(complement(ASCII_DIGIT)) : '\\P{Nd}';
    case 'space':
      return rangeText(ascii ? ASCII_SPACE : UNICODE_SPACE);
    case 'not_space':
      return rangeText(complement(ascii ? ASCII_SPACE : UNICODE_SPACE));
    case 'word':
      return ascii ? rangeText(ASCII_WORD) : UNICODE_WORD;
    case 'not_word':
      return ascii ? rangeText(complement(ASCII_WORD)) : null;
  }
}

class Emitter {
  private atomics = 0;

  emitSeq(seq: Seq, flags: number): string {
    return seq.items.map((node) => this.emitNode(node, flags)).join('');
  }

  private foldsDottedI(flags: number): boolean {
    return (flags & F_IGNORECASE) !== 0 && (flags & F_ASCII) === 0;
  }

  /** One character of a Python set: a class, or (with Unicode \W in it) a look-ahead and a class. */
  private emitSet(negate: boolean, items: SetItem[], flags: number): string {
    const ascii = (flags & F_ASCII) !== 0;
    let body = '';
    let dottedI = false;
    let notWord = false;
    for (const item of items) {
      if (item.t === 'lit') {
        body += char(item.cp);
        dottedI ||= DOTTED_I.includes(item.cp);
      } else if (item.t === 'range') {
        body += `${char(item.lo)}-${char(item.hi)}`;
        dottedI ||= DOTTED_I.some((cp) => cp >= item.lo && cp <= item.hi);
      } else {
        const text = categoryItems(item.cat, ascii);
        if (text === null) notWord = true;
        else body += text;
      }
    }
    if (dottedI && this.foldsDottedI(flags)) body += DOTTED_I.map(char).join('');
    if (!notWord) return `[${negate ? '^' : ''}${body}]`;
    const word = `[${UNICODE_WORD}]`;
    // In the set: a member, or not a word character. Not in it: a word character that is no member.
    if (negate) return body ? `(?:(?![${body}])${word})` : word;
    return body ? `(?:[${body}]|(?!${word})[\\s\\S])` : `(?:(?!${word})[\\s\\S])`;
  }

  private emitNode(node: Node, flags: number): string {
    const ascii = (flags & F_ASCII) !== 0;
    const word = `[${ascii ? rangeText(ASCII_WORD) : UNICODE_WORD}]`;
    switch (node.t) {
      case 'lit':
        if (this.foldsDottedI(flags) && DOTTED_I.includes(node.cp)) return this.emitSet(false, [node], flags);
        return char(node.cp);
      case 'set':
        return this.emitSet(node.negate, node.items, flags);
      case 'any':
        return flags & F_DOTALL ? '[\\s\\S]' : '[^\\n]';
      case 'at':
        switch (node.at) {
          case 'beginning':
            return flags & F_MULTILINE ? '(?:^|(?<=\\n))' : '^';
          case 'beginning_string':
            return '^';
          case 'end':
            return flags & F_MULTILINE ? '(?=\\n|$)' : '(?=\\n?$)';
          case 'end_string':
            return '$';
          case 'boundary':
            return `(?:(?<=${word})(?!${word})|(?<!${word})(?=${word}))`;
          case 'non_boundary':
            // Python: never at the start of an empty string.
            return `(?:(?<=${word})(?=${word})|(?<!${word})(?!${word})(?:(?<=[\\s\\S])|(?=[\\s\\S])))`;
        }
        break;
      case 'repeat': {
        const max = node.max === MAXREPEAT ? '' : String(node.max);
        const quantified = `(?:${this.emitSeq(node.body, flags)}){${node.min},${max}}`;
        if (node.kind === 'lazy') return `${quantified}?`;
        if (node.kind === 'greedy') return quantified;
        return this.atomic(quantified);
      }
      case 'group': {
        const inner = this.emitSeq(node.body, combineFlags(flags, node.add, node.del));
        return node.group === null ? `(?:${inner})` : `(?<g${node.group}>${inner})`;
      }
      case 'atomic':
        return this.atomic(`(?:${this.emitSeq(node.body, flags)})`);
      case 'assert':
        return `(?${node.behind ? '<' : ''}${node.negate ? '!' : '='}${this.emitSeq(node.body, flags)})`;
      case 'ref':
        return `\\k<g${node.group}>`;
      case 'branch':
        return `(?:${node.alts.map((alt) => this.emitSeq(alt, flags)).join('|')})`;
      case 'cond':
        break;
    }
    throw new Error(`internal: no translation for ${node.t}`);
  }

  /** An atomic group: what a look-ahead captured, consumed by a backreference (nothing to backtrack into). */
  private atomic(inner: string): string {
    const name = `a${++this.atomics}`;
    return `(?=(?<${name}>${inner}))\\k<${name}>`;
  }
}

export type PythonRegexResult =
  /** Python accepts it; `source`/`flags` make a JavaScript RegExp with the same meaning (not anchored). */
  | { kind: 'ok'; source: string; flags: string }
  /** Python's re.compile refuses it, with this message. */
  | { kind: 'invalid'; message: string }
  /** Python accepts it, but it uses a construct JavaScript cannot match exactly as Python does. */
  | { kind: 'unsupported'; message: string };

const at = (position: number | null) => (position === null ? '' : ` at position ${position}`);

/** Parses `pattern` with Python's grammar and translates it; never throws. */
export function translatePythonRegex(pattern: string): PythonRegexResult {
  const st = new State();
  let root: Seq;
  try {
    const src = new Source(pattern);
    root = parseSub(src, st, false, 0);
    if (!(st.flags & F_ASCII)) st.flags |= F_UNICODE;
    else if (st.flags & F_UNICODE) throw new PythonReError('ASCII and UNICODE flags are incompatible', null);
    if (src.next !== null) throw src.error('unbalanced parenthesis');
    for (const [group, position] of st.grouprefpos) {
      if (group >= st.groups) throw new PythonReError(`invalid group reference ${group}`, position);
    }
    compileChecks(root, st.flags, st);
  } catch (error) {
    if (error instanceof PythonReError) {
      return { kind: 'invalid', message: `${error.message}${at(error.position)}` };
    }
    throw error;
  }
  checkCaseScopes(root, st.flags, st.flags, st);
  checkPossessive(root, st);
  checkReferences(root, st);
  if (st.unsupported) {
    return {
      kind: 'unsupported',
      message: `${st.unsupported.construct}${at(st.unsupported.position)}`,
    };
  }
  const source = new Emitter().emitSeq(root, st.flags);
  return { kind: 'ok', source, flags: st.flags & F_IGNORECASE ? 'iu' : 'u' };
}

/**
 * Compiles `pattern` as Nova's `re.compile(pattern).match` uses it: a RegExp
 * anchored at the start of the subject (only), or the reason it is refused.
 */
export function compilePythonMatch(pattern: string): { regexp: RegExp } | { error: string } {
  const result = translatePythonRegex(pattern);
  if (result.kind === 'invalid')
    return { error: `is not a valid Python regular expression (${result.message})` };
  if (result.kind === 'unsupported') {
    return {
      error: `is a Python regular expression Berth cannot match exactly as Python does: it uses ${result.message}`,
    };
  }
  const regexp = new RegExp(`^(?:${result.source})`, result.flags);
  // V8 compiles a pattern at its first use: use it now, so nothing fails later.
  regexp.test('0000');
  return { regexp };
}
