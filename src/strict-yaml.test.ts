import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../test/helpers/agent.js';
import { ConfigError } from './errors.js';
import { loadAgentConfig } from './server/agent/config.js';
import { parseStrictYaml } from './strict-yaml.js';

describe('parseStrictYaml', () => {
  it('parses YAML and JSON', () => {
    expect(parseStrictYaml('a: 1\nb: [x, y]\n')).toEqual({ a: 1, b: ['x', 'y'] });
    expect(parseStrictYaml('{"a": {"b": true}}')).toEqual({ a: { b: true } });
  });

  it('refuses what yaml would only warn about, naming it', () => {
    expect(() => parseStrictYaml('!custom x')).toThrowError(/Unresolved tag: !custom/);
    expect(() => parseStrictYaml('%FOO bar\n---\na: 1')).toThrowError(/directive/i);
    expect(() => parseStrictYaml('a: [1, 2')).toThrowError();
  });

  it('makes an agent config with an unresolved tag a configuration error', async () => {
    const dir = await tempDir('berth-yaml-');
    const path = join(dir.path, 'agent.yaml');
    await writeFile(path, 'host: !hostname\n');
    const err = await loadAgentConfig(path).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/not valid YAML\/JSON: Unresolved tag: !hostname/);
    await dir.cleanup();
  });
});
