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

import { pythonDecimal } from './python-values.js';

const MAXREPEAT = 4294967295n;
const MAXGROUPS = 1073741823;

// sre's flag bits.
const F_TEMPLATE = 1;
const F_IGNORECASE = 2;
const F_LOCALE = 4;
const F_MULTILINE = 8;
const F_DOTALL = 16;
const F_UNICODE = 32;
const F_VERBOSE = 64;
const F_DEBUG = 128;
const F_ASCII = 256;
const TYPE_FLAGS = F_ASCII | F_LOCALE | F_UNICODE;
const GLOBAL_FLAGS = F_DEBUG | F_TEMPLATE;
const FLAGS: ReadonlyMap<string, number> = new Map([
  ['i', F_IGNORECASE],
  ['L', F_LOCALE],
  ['m', F_MULTILINE],
  ['s', F_DOTALL],
  ['x', F_VERBOSE],
  ['a', F_ASCII],
  ['t', F_TEMPLATE],
  ['u', F_UNICODE],
]);

const SPECIAL_CHARS = new Set('.\\[{()*+?^$|');
const REPEAT_CHARS = new Set('*+?{');
const DIGITS = new Set('0123456789');
const OCTDIGITS = new Set('01234567');
const HEXDIGITS = new Set('0123456789abcdefABCDEF');
const ASCIILETTERS = new Set('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ');
const WHITESPACE = new Set(' \t\n\r\v\f');
const ESCAPES: ReadonlyMap<string, number> = new Map([
  ['\\a', 7],
  ['\\b', 8],
  ['\\f', 12],
  ['\\n', 10],
  ['\\r', 13],
  ['\\t', 9],
  ['\\v', 11],
  ['\\\\', 92],
]);

type Category = 'digit' | 'not_digit' | 'space' | 'not_space' | 'word' | 'not_word';
type At = 'beginning' | 'beginning_string' | 'end' | 'end_string' | 'boundary' | 'non_boundary';
const CATEGORIES: ReadonlyMap<string, Category> = new Map([
  ['\\d', 'digit'],
  ['\\D', 'not_digit'],
  ['\\s', 'space'],
  ['\\S', 'not_space'],
  ['\\w', 'word'],
  ['\\W', 'not_word'],
]);
const ANCHORS: ReadonlyMap<string, At> = new Map([
  ['\\A', 'beginning_string'],
  ['\\b', 'boundary'],
  ['\\B', 'non_boundary'],
  ['\\Z', 'end_string'],
]);

type SetItem =
  | { t: 'lit'; cp: number; named?: true }
  | { t: 'range'; lo: number; hi: number }
  | { t: 'cat'; cat: Category };

interface Seq {
  items: Node[];
  width?: [bigint, bigint];
}

type Node =
  | { t: 'lit'; cp: number; named?: true }
  | { t: 'set'; negate: boolean; items: SetItem[] }
  | { t: 'any' }
  | { t: 'at'; at: At }
  | { t: 'repeat'; min: bigint; max: bigint; kind: 'greedy' | 'lazy' | 'possessive'; body: Seq; pos: number }
  | { t: 'group'; group: number | null; add: number; del: number; body: Seq; pos: number }
  | { t: 'atomic'; body: Seq }
  | { t: 'assert'; behind: boolean; negate: boolean; body: Seq }
  | { t: 'ref'; group: number; pos: number }
  | { t: 'cond'; group: number; yes: Seq; no: Seq | null; pos: number }
  | { t: 'branch'; alts: Seq[] };

/** A pattern Python's `re.compile` refuses: its message and position. */
class PythonReError extends Error {
  constructor(
    message: string,
    readonly position: number | null,
  ) {
    super(message);
  }
}

const codePoints = (text: string) => Array.from(text);
const cpLength = (text: string) => codePoints(text).length;
const cpOf = (char: string) => char.codePointAt(0)!;
/** Python's repr() of a str, near enough for messages. */
const repr = (text: string) => `'${text.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

/** Python's tokenizer: one code point, or a backslash and the code point after it. */
class Source {
  private readonly chars: string[];
  private index = 0;
  next: string | null = null;
  private nextLength = 0;

  constructor(pattern: string) {
    this.chars = codePoints(pattern);
    this.advance();
  }

  private advance(): void {
    let i = this.index;
    if (i >= this.chars.length) {
      this.next = null;
      this.nextLength = 0;
      return;
    }
    let char = this.chars[i]!;
    let length = 1;
    if (char === '\\') {
      i += 1;
      if (i >= this.chars.length) {
        throw new PythonReError('bad escape (end of pattern)', this.chars.length - 1);
      }
      char += this.chars[i]!;
      length = 2;
    }
    this.index = i + 1;
    this.next = char;
    this.nextLength = length;
  }

  match(char: string): boolean {
    if (char === this.next) {
      this.advance();
      return true;
    }
    return false;
  }

  get(): string | null {
    const token = this.next;
    this.advance();
    return token;
  }

  getwhile(n: number, charset: ReadonlySet<string>): string {
    let result = '';
    for (let k = 0; k < n; k++) {
      const c = this.next;
      if (c === null || !charset.has(c)) break;
      result += c;
      this.advance();
    }
    return result;
  }

  getuntil(terminator: string, name: string): string {
    let result = '';
    for (;;) {
      const c = this.next;
      this.advance();
      if (c === null) {
        if (!result) throw this.error(`missing ${name}`);
        throw this.error(`missing ${terminator}, unterminated name`, cpLength(result));
      }
      if (c === terminator) {
        if (!result) throw this.error(`missing ${name}`, 1);
        break;
      }
      result += c;
    }
    return result;
  }

  tell(): number {
    return this.index - this.nextLength;
  }

  seek(index: number): void {
    this.index = index;
    this.advance();
  }

  error(message: string, offset = 0): PythonReError {
    return new PythonReError(message, this.tell() - offset);
  }
}

/** Python's str.isidentifier(). */
const IDENTIFIER = /^[\p{XID_Start}_]\p{XID_Continue}*$/u;

function checkGroupName(src: Source, name: string, offset: number): void {
  if (!IDENTIFIER.test(name)) {
    throw src.error(`bad character in group name ${repr(name)}`, cpLength(name) + offset);
  }
}

class State {
  flags = 0;
  readonly groupdict = new Map<string, number>();
  readonly groupwidths: ([bigint, bigint] | null)[] = [null];
  lookbehindgroups: number | null = null;
  readonly grouprefpos = new Map<number, number>();
  /** The first construct Python accepts and Berth cannot translate exactly. */
  unsupported: { construct: string; position: number } | null = null;

  get groups(): number {
    return this.groupwidths.length;
  }

  opengroup(name: string | null): number {
    const gid = this.groups;
    this.groupwidths.push(null);
    if (this.groups > MAXGROUPS) throw new PythonReError('too many groups', null);
    if (name !== null) {
      const ogid = this.groupdict.get(name);
      if (ogid !== undefined) {
        throw new PythonReError(
          `redefinition of group name ${repr(name)} as group ${gid}; was group ${ogid}`,
          null,
        );
      }
      this.groupdict.set(name, gid);
    }
    return gid;
  }

  closegroup(gid: number, p: Seq): void {
    this.groupwidths[gid] = width(p, this);
  }

  checkgroup(gid: number): boolean {
    return gid < this.groups && this.groupwidths[gid] !== null;
  }

  checklookbehindgroup(gid: number, src: Source): void {
    if (this.lookbehindgroups !== null) {
      if (!this.checkgroup(gid)) throw src.error('cannot refer to an open group');
      if (gid >= this.lookbehindgroups) {
        throw src.error('cannot refer to group defined in the same lookbehind subpattern');
      }
    }
  }

  noteUnsupported(construct: string, position: number): void {
    this.unsupported ??= { construct, position };
  }
}

const minBig = (a: bigint, b: bigint) => (a < b ? a : b);
const maxBig = (a: bigint, b: bigint) => (a > b ? a : b);

/** sre's SubPattern.getwidth(): (min, max) characters, capped as Python caps them. */
function width(seq: Seq, st: State): [bigint, bigint] {
  if (seq.width) return seq.width;
  let lo = 0n;
  let hi = 0n;
  for (const node of seq.items) {
    switch (node.t) {
      case 'branch': {
        let i = MAXREPEAT - 1n;
        let j = 0n;
        for (const alt of node.alts) {
          const [l, h] = width(alt, st);
          i = minBig(i, l);
          j = maxBig(j, h);
        }
        lo += i;
        hi += j;
        break;
      }
      case 'atomic':
      case 'group': {
        const [i, j] = width(node.body, st);
        lo += i;
        hi += j;
        break;
      }
      case 'repeat': {
        const [i, j] = width(node.body, st);
        lo += i * node.min;
        hi += j * node.max;
        break;
      }
      case 'lit':
      case 'set':
      case 'any':
        lo += 1n;
        hi += 1n;
        break;
      case 'ref': {
        const [i, j] = st.groupwidths[node.group]!;
        lo += i;
        hi += j;
        break;
      }
      case 'cond': {
        let [i, j] = width(node.yes, st);
        if (node.no !== null) {
          const [l, h] = width(node.no, st);
          i = minBig(i, l);
          j = maxBig(j, h);
        } else {
          i = 0n;
        }
        lo += i;
        hi += j;
        break;
      }
      default:
        break;
    }
  }
  seq.width = [minBig(lo, MAXREPEAT - 1n), minBig(hi, MAXREPEAT)];
  return seq.width;
}

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

function parseSub(src: Source, st: State, verbose: boolean, nested: number): Seq {
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

/** sre_compile._combine_flags. */
function combineFlags(flags: number, add: number, del: number): number {
  const base = add & TYPE_FLAGS ? flags & ~TYPE_FLAGS : flags;
  return (base | add) & ~del;
}

/** The checks sre_compile makes after parsing (look-behind width, the TEMPLATE flag). */
function compileChecks(seq: Seq, flags: number, st: State): void {
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
function checkReferences(root: Seq, st: State): void {
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
function checkPossessive(seq: Seq, st: State): void {
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
function checkCaseScopes(seq: Seq, flags: number, globalFlags: number, st: State): void {
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
