import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { quote } from './pg-executor.js';

describe('quote: an SQL string literal', () => {
  it("is node-postgres's escapeLiteral, character for character", () => {
    const client = new pg.Client();
    const texts = [
      '',
      'plain',
      "it's",
      "''",
      'a\\b',
      "both ' and \\ and '\\'",
      '\\',
      JSON.stringify({ note: 'say "hi"\n\tit\'s C:\\dir', emoji: '🙂', nul: '\u0000' }),
      'x'.repeat(5000) + "'",
    ];
    for (const t of texts) expect(quote(t)).toBe(client.escapeLiteral(t));
  });
});
