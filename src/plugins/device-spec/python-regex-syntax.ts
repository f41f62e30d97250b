/**
 * The vocabulary of the Python `re` translator (python-regex.ts): sre's
 * constants and flags, the parse tree's node types and their width, Python's
 * error, the tokenizer (Source) and the parse state.
 */

export const MAXREPEAT = 4294967295n;
export const MAXGROUPS = 1073741823;

// sre's flag bits.
export const F_TEMPLATE = 1;
export const F_IGNORECASE = 2;
const F_LOCALE = 4;
export const F_MULTILINE = 8;
export const F_DOTALL = 16;
export const F_UNICODE = 32;
export const F_VERBOSE = 64;
const F_DEBUG = 128;
export const F_ASCII = 256;
export const TYPE_FLAGS = F_ASCII | F_LOCALE | F_UNICODE;
export const GLOBAL_FLAGS = F_DEBUG | F_TEMPLATE;
export const FLAGS: ReadonlyMap<string, number> = new Map([
  ['i', F_IGNORECASE],
  ['L', F_LOCALE],
  ['m', F_MULTILINE],
  ['s', F_DOTALL],
  ['x', F_VERBOSE],
  ['a', F_ASCII],
  ['t', F_TEMPLATE],
  ['u', F_UNICODE],
]);

export const SPECIAL_CHARS = new Set('.\\[{()*+?^$|');
export const REPEAT_CHARS = new Set('*+?{');
export const DIGITS = new Set('0123456789');
export const OCTDIGITS = new Set('01234567');
export const HEXDIGITS = new Set('0123456789abcdefABCDEF');
export const ASCIILETTERS = new Set('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ');
export const WHITESPACE = new Set(' \t\n\r\v\f');
export const ESCAPES: ReadonlyMap<string, number> = new Map([
  ['\\a', 7],
  ['\\b', 8],
  ['\\f', 12],
  ['\\n', 10],
  ['\\r', 13],
  ['\\t', 9],
  ['\\v', 11],
  ['\\\\', 92],
]);

export type Category = 'digit' | 'not_digit' | 'space' | 'not_space' | 'word' | 'not_word';
type At = 'beginning' | 'beginning_string' | 'end' | 'end_string' | 'boundary' | 'non_boundary';
export const CATEGORIES: ReadonlyMap<string, Category> = new Map([
  ['\\d', 'digit'],
  ['\\D', 'not_digit'],
  ['\\s', 'space'],
  ['\\S', 'not_space'],
  ['\\w', 'word'],
  ['\\W', 'not_word'],
]);
export const ANCHORS: ReadonlyMap<string, At> = new Map([
  ['\\A', 'beginning_string'],
  ['\\b', 'boundary'],
  ['\\B', 'non_boundary'],
  ['\\Z', 'end_string'],
]);

export type SetItem =
  | { t: 'lit'; cp: number; named?: true }
  | { t: 'range'; lo: number; hi: number }
  | { t: 'cat'; cat: Category };

export interface Seq {
  items: Node[];
  width?: [bigint, bigint];
}

export type Node =
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
export class PythonReError extends Error {
  constructor(
    message: string,
    readonly position: number | null,
  ) {
    super(message);
  }
}

export const codePoints = (text: string) => Array.from(text);
export const cpLength = (text: string) => codePoints(text).length;
export const cpOf = (char: string) => char.codePointAt(0)!;
/** Python's repr() of a str, near enough for messages. */
export const repr = (text: string) => `'${text.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

/** Python's tokenizer: one code point, or a backslash and the code point after it. */
export class Source {
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
export const IDENTIFIER = /^[\p{XID_Start}_]\p{XID_Continue}*$/u;

export function checkGroupName(src: Source, name: string, offset: number): void {
  if (!IDENTIFIER.test(name)) {
    throw src.error(`bad character in group name ${repr(name)}`, cpLength(name) + offset);
  }
}

export class State {
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
export function width(seq: Seq, st: State): [bigint, bigint] {
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
