import { describe, expect, it } from 'vitest';
import { splitJsonValues } from './guest/json-values.js';

describe('splitJsonValues (buf curl stream output)', () => {
  it('splits concatenated indented objects, braces inside strings included', () => {
    const text =
      '{\n  "event": {\n    "message": "a } and a { and \\" quote",\n    "n": [1, {"x": 2}]\n  }\n}\n{\n  "event": {}\n}\n';
    expect(splitJsonValues(text)).toEqual([
      { event: { message: 'a } and a { and " quote', n: [1, { x: 2 }] } },
      { event: {} },
    ]);
    expect(splitJsonValues('  \n')).toEqual([]);
  });

  it('refuses truncated or foreign text', () => {
    expect(() => splitJsonValues('{"a": 1}\n{"b": ')).toThrow(/truncated/);
    expect(() => splitJsonValues('{"a": 1} oops')).toThrow(/unexpected 'o'/);
    expect(() => splitJsonValues('}')).toThrow(/unbalanced/);
  });
});
