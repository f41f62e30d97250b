/**
 * The Python-regex translator on the cases that made it necessary
 * (docs/decisions.md 44)
 * and on each construct of the grammar. test/e2e/nova-devspec.test.ts checks
 * it against Python's own `re` on thousands of generated patterns.
 */
import { describe, expect, it } from 'vitest';
import { compilePythonMatch, translatePythonRegex } from './python-regex.js';

/** Whether Python's re.match(pattern, subject) would match, by the translation. */
function matches(pattern: string, subject: string): boolean {
  const compiled = compilePythonMatch(pattern);
  if ('error' in compiled) throw new Error(compiled.error);
  return compiled.regexp.test(subject);
}

describe('translatePythonRegex: Python syntax is Python syntax', () => {
  it.each([
    ['(?i)0A', '0a', true],
    ['(?P<n>0a)', '0a', true],
    ['(?P<n>0)(?P=n)', '00', true],
    ['(?P<n>0)(?P=n)', '01', false],
    ['(?#c)0a', '0a', true],
    ['0*+', '000', true],
    ['0*+0', '000', false], // possessive: gives nothing back
    ['(?>0*)0', '000', false], // atomic likewise
    ['(?>0|01)1', '011', true], // the atomic group keeps "0", then "1" follows
    ['(?>01|0)1', '01', false], // it keeps "01" and never tries "0"
    ['(?:01|0)1', '01', true],
    ['(?x) 0 a  # a comment', '0a', true],
    ['0a\\Z', '0a', true], // \Z is the end of the string in Python
    ['0a\\Z', '0a\n', false],
    ['0a$', '0a\n', true], // $ also before a final newline
    ['[]5]', ']', true], // ] first in a set is a literal
    ['[]5]', '5', true],
    ['\\A0a', '0a', true],
    ['0{,1}a', 'a', true], // {,n} is {0,n}
    ['0{,1}a', '0a', true],
    ['a{', 'a{', true], // an incomplete quantifier is a literal
    ['a{1,2,3}', 'a{1,2,3}', true],
    ['\\d', '\u0663', true], // Unicode digits, as Python's str patterns
    ['\\s', '\u001c', true], // Python's whitespace, not JavaScript's
    ['\\s', '\ufeff', false],
    ['.', '\n', false],
    ['(?s).', '\n', true],
    ['(?m)a$\nb', 'a\nb', true],
    ['\\B', '', false], // Python: no \B in an empty string
    ['\\b0', '0', true],
    ['(?i)\u0130', 'i', true], // Python folds İ to i
    ['(?i)\u0131', 'I', true],
    ['(?a)\\w', '\u00e9', false],
    ['\\w', '\u00e9', true],
    ['(?<=0)a', '0a', false], // re.match starts at the first character
    ['0(?<=0)a', '0a', true],
    ['(0)\\1', '00', true],
    ['\\061', '1', true], // octal
    ['\\x30\\u0031\\U00000032', '012', true],
    ['(?:F*?[^b]a)+', '0a0a', true], // Node 20's V8 misses this one with the v flag: the translation uses u
    ['[\\W0]', '-', true],
    ['[\\W0]', '0', true],
    ['[\\W0]', 'a', false],
    ['[^\\W0]', 'a', true],
    ['[^\\W0]', '0', false],
    ['[^\\W0]', '-', false],
    ['[\\S]', '\u001c', false],
    ['(?a)[\\D]', '\u0663', true],
  ])('%j on %j: %j', (pattern, subject, expected) => {
    expect(matches(pattern, subject)).toBe(expected);
  });

  it('anchors at the start of the field only, like re.match', () => {
    expect(matches('3', '3b')).toBe(true);
    expect(matches('b', '3b')).toBe(false);
    expect(matches('3b|5e', '5e')).toBe(true);
  });

  it.each([
    ['\\z', 'bad escape \\z at position 0'],
    ['\\i', 'bad escape \\i at position 0'],
    ['\\8', 'invalid group reference 8 at position 1'],
    ['\\k<n>', 'bad escape \\k at position 0'],
    ['\\p{L}', 'bad escape \\p at position 0'],
    ['[\\d-z]', 'bad character range \\d-z at position 1'],
    ['(?<n>0a)', 'unknown extension ?<n at position 1'],
    ['[^]', 'unterminated character set at position 0'],
    ['(', 'missing ), unterminated subpattern at position 0'],
    ['a)|(b', 'unbalanced parenthesis at position 1'],
    ['*', 'nothing to repeat at position 0'],
    ['a**', 'multiple repeat at position 2'],
    ['a(?i)', 'global flags not at the start of the expression at position 1'],
    ['(?L)', "bad inline flags: cannot use 'L' flag with a str pattern at position 3"],
    ['(?a)(?u)', 'ASCII and UNICODE flags are incompatible'],
    ['(?<=a|bc)', 'look-behind requires fixed-width pattern'],
    ['a{2,1}', 'min repeat greater than max repeat at position 2'],
    ['a{4294967295}', 'the repetition number is too large'],
    ['(?t)a*', 'internal: unsupported template operator MAX_REPEAT'],
    ['(a\\1)', 'cannot refer to an open group at position 2'],
    ['\\', 'bad escape (end of pattern) at position 0'],
  ])('refuses %j as Python does: %s', (pattern, message) => {
    expect(translatePythonRegex(pattern)).toEqual({ kind: 'invalid', message });
  });

  it.each([
    ['\\N{DIGIT ZERO}', 'the named character \\N{DIGIT ZERO}'],
    ['(0)?(?(1)a|b)', 'a conditional group'],
    ['(?i:a)b', 'a case-insensitivity scope (?i:…)'],
    ['(?i)(?-i:a)b', 'a case-insensitivity scope (?-i:…)'],
    ['(a)|\\1', 'a reference to group 1 where that group may not have matched'],
    ['(a)*\\1', 'a reference to group 1'],
    ['(?:(a)|b)\\1', 'a reference to group 1'],
    ['(?!(a))\\1', 'a reference to group 1'],
    ['(?<=(a))\\1', 'a reference to group 1'],
    // Python 3.11.2 (Debian 12) matches these wrongly: gh-106052, gh-100061.
    ['(?:3b)*+', 'a possessive quantifier (*+, ++, ?+, {m,n}+) over more than one character'],
    ['(?!.)*+ ', 'a possessive quantifier'],
  ])('refuses %j, which Python accepts, naming the construct', (pattern, construct) => {
    const result = translatePythonRegex(pattern);
    expect(result.kind).toBe('unsupported');
    expect((result as { message: string }).message).toContain(construct);
  });

  it('keeps what stays exact: a reference to a group that has certainly matched', () => {
    for (const pattern of [
      '(a)\\1',
      '(?:(a)\\1)*',
      '(?=(a))\\1',
      '(?>(a))\\1',
      '(a)(?:b|\\1)',
      '(?i)(a)\\1',
    ]) {
      expect(translatePythonRegex(pattern).kind).toBe('ok');
    }
    expect(matches('(?i)(a)\\1', 'aA')).toBe(true);
  });

  it('never throws, whatever the input', () => {
    for (const pattern of [
      '\ud800',
      '[\ud800-\udfff]',
      '\\U00110000',
      '(?P<\u00e9>a)(?P=\u00e9)',
      '(?P<1>a)',
    ]) {
      expect(() => translatePythonRegex(pattern)).not.toThrow();
    }
    expect(translatePythonRegex('\\U00110000')).toEqual({
      kind: 'invalid',
      message: 'bad escape \\U00110000 at position 0',
    });
  });
});
