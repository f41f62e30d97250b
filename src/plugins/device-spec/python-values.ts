/**
 * How Python reads the values Nova reads: `str.strip()`, `int(text, 16)` and
 * `json.loads`. Nova's device_spec semantics rest on them (a product id with a
 * space before `*` is refused, `managed: 1.0` is not `1`), and JavaScript's
 * `trim`, `parseInt` and `JSON.parse` differ from each in small ways.
 */

/** The characters Python's str.strip() removes (str.isspace()). */
const STRIP_CHARS =
  '\\t\\n\\v\\f\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
/** The characters int() skips around a number: str.isspace() except U+001C to U+001F (int() tests ASCII with C's isspace). */
const INT_SPACE_CHARS =
  '\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';

const STRIP = new RegExp(`^[${STRIP_CHARS}]+|[${STRIP_CHARS}]+$`, 'gu');
const INT_SPACE = new RegExp(`^[${INT_SPACE_CHARS}]+|[${INT_SPACE_CHARS}]+$`, 'gu');

/** Python's str.strip(). */
export function pyStrip(text: string): string {
  return text.replace(STRIP, '');
}

/**
 * What Python's `int(text, 16)` makes of `text`:
 * - `{ digits }`: a plain hex number (optional `0x`, ASCII hex digits), its
 *   digits lower-cased without leading zeros;
 * - `{ unusual }`: a number Python reads that Berth refuses (docs/nova-device-spec.md):
 *   a sign (`-1` would match nothing in Nova), `_` separators, or non-ASCII digits;
 * - `null`: Python raises ValueError too.
 */
export function pythonHex(text: string): { digits: string } | { unusual: string } | null {
  const body = text.replace(INT_SPACE, '');
  const m = /^([+-]?)(0[xX]_?)?((?:[0-9a-fA-F]|\p{Nd})+(?:_(?:[0-9a-fA-F]|\p{Nd})+)*)$/u.exec(body);
  if (!m) return null;
  const [, sign, prefix = '', digits = ''] = m;
  if (sign) return { unusual: `a sign (${sign})` };
  if (prefix.endsWith('_') || digits.includes('_')) return { unusual: 'a "_" separator' };
  if (/[^\0-\u007f]/u.test(digits)) return { unusual: 'non-ASCII digits' };
  return { digits: digits.toLowerCase().replace(/^0+(?=.)/, '') };
}

/** Python's int(text) in base 10 (how re reads a conditional group's number); null when int() raises. */
export function pythonDecimal(text: string): bigint | null {
  const m = /^([+-]?)(\p{Nd}+(?:_\p{Nd}+)*)$/u.exec(text.replace(INT_SPACE, ''));
  if (!m) return null;
  let digits = '';
  for (const ch of m[2]!.replace(/_/g, '')) digits += String(decimalValue(ch));
  const value = BigInt(digits);
  return m[1] === '-' ? -value : value;
}

/** The value of a Unicode decimal digit (they come in runs of ten, 0 to 9). */
export function decimalValue(ch: string): number {
  let cp = ch.codePointAt(0)!;
  let steps = 0;
  while (cp > 0 && /\p{Nd}/u.test(String.fromCodePoint(cp - 1))) {
    cp -= 1;
    steps += 1;
  }
  return steps % 10;
}

/**
 * A JSON number written with a fraction or an exponent (`1.0`, `1e0`) or
 * Python's NaN/Infinity: Python's json makes it a float, and str() of a float
 * is never "1" or "0", so oslo's booleans refuse it where they accept `1`.
 */
export class JsonFloat {
  constructor(
    /** The number as written. */
    readonly text: string,
    readonly value: number,
  ) {}

  toJSON(): number | string {
    return Number.isFinite(this.value) ? this.value : this.text;
  }
}

const MAX_DEPTH = 500;

class JsonReader {
  private i = 0;
  constructor(private readonly text: string) {}

  fail(what: string): never {
    throw new SyntaxError(`${what} at position ${this.i}`);
  }

  ws(): void {
    while (this.i < this.text.length && ' \t\n\r'.includes(this.text[this.i]!)) this.i++;
  }

  document(): unknown {
    this.ws();
    const value = this.value(0);
    this.ws();
    if (this.i < this.text.length) this.fail('Extra data');
    return value;
  }

  value(depth: number): unknown {
    if (depth > MAX_DEPTH) this.fail('Nested too deeply');
    const c = this.text[this.i];
    if (c === '{') return this.object(depth);
    if (c === '[') return this.array(depth);
    if (c === '"') return this.string();
    for (const [word, value] of [
      ['true', true],
      ['false', false],
      ['null', null],
      ['NaN', new JsonFloat('NaN', Number.NaN)],
      ['Infinity', new JsonFloat('Infinity', Number.POSITIVE_INFINITY)],
      ['-Infinity', new JsonFloat('-Infinity', Number.NEGATIVE_INFINITY)],
    ] as const) {
      if (this.text.startsWith(word, this.i)) {
        this.i += word.length;
        return value;
      }
    }
    const m = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;
    m.lastIndex = this.i;
    const n = m.exec(this.text);
    if (!n) this.fail('Expecting value');
    this.i += n[0].length;
    const value = Number(n[0]);
    return n[1] || n[2] ? new JsonFloat(n[0], value) : value;
  }

  object(depth: number): Record<string, unknown> {
    // A null prototype, so that a "__proto__" key is a key like any other.
    const out = Object.create(null) as Record<string, unknown>;
    this.i++;
    this.ws();
    if (this.text[this.i] === '}') {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.text[this.i] !== '"') this.fail('Expecting property name enclosed in double quotes');
      const key = this.string();
      this.ws();
      if (this.text[this.i] !== ':') this.fail("Expecting ':' delimiter");
      this.i++;
      this.ws();
      out[key] = this.value(depth + 1);
      this.ws();
      const c = this.text[this.i++];
      if (c === '}') return out;
      if (c !== ',') {
        this.i--;
        this.fail("Expecting ',' delimiter");
      }
    }
  }

  array(depth: number): unknown[] {
    const out: unknown[] = [];
    this.i++;
    this.ws();
    if (this.text[this.i] === ']') {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      out.push(this.value(depth + 1));
      this.ws();
      const c = this.text[this.i++];
      if (c === ']') return out;
      if (c !== ',') {
        this.i--;
        this.fail("Expecting ',' delimiter");
      }
    }
  }

  string(): string {
    const start = this.i;
    // biome-ignore lint/suspicious/noControlCharactersInRegex: JSON (and Python's json, strict) refuse raw control characters in a string.
    const m = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
    m.lastIndex = start;
    const s = m.exec(this.text);
    if (!s) this.fail('Invalid string');
    this.i += s[0].length;
    return JSON.parse(s[0]) as string;
  }
}

/**
 * Python's `json.loads` (Nova reads each device_spec line with it): JSON, plus
 * NaN, Infinity and -Infinity, with floats kept apart from integers as
 * JsonFloat. Objects have a null prototype. Throws SyntaxError.
 */
export function parsePythonJson(text: string): unknown {
  return new JsonReader(text).document();
}
