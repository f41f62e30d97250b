import { describe, expect, it } from 'vitest';
import { JsonValueStream, splitJsonValues } from './guest/json-values.js';

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

describe('JsonValueStream (buf curl stream output, as it arrives)', () => {
  it('gives each value once complete, across chunks of any size, braces inside strings included', () => {
    const text =
      '{\n  "event": {\n    "message": "a } and a { and \\" quote",\n    "n": [1, {"x": 2}]\n  }\n}\n{\n  "event": {}\n}\n';
    for (const size of [1, 2, 7, 1000]) {
      const s = new JsonValueStream();
      const got: unknown[] = [];
      for (let i = 0; i < text.length; i += size) got.push(...s.push(text.slice(i, i + size)));
      expect(got).toEqual(splitJsonValues(text));
    }
  });

  it('refuses foreign text', () => {
    expect(() => new JsonValueStream().push('{"a": 1} oops')).toThrow(/unexpected 'o'/);
    expect(() => new JsonValueStream().push('}')).toThrow(/unbalanced/);
  });
});
