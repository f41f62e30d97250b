import { hostname } from 'node:os';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import { parseAgentConfig } from './config.js';

const parse = (host: unknown) => parseAgentConfig({ sysfs_root: '/', host }, {}, '/tmp');

describe('agent config: host', () => {
  it('takes a host name as written, and the machine’s when none is given', () => {
    expect(parse('compute-7.example.org').host).toBe('compute-7.example.org');
    expect(parseAgentConfig({ sysfs_root: '/' }, {}, '/tmp').host).toBe(hostname());
  });

  it.each(['bad host', 'h/../x', '-x', 'x-', 'h:7071', 'a'.repeat(255)])(
    'refuses %j at load, naming the key and the value (the scheduler would refuse it at every registration)',
    (bad) => {
      expect(() => parse(bad)).toThrow(ConfigError);
      expect(() => parse(bad)).toThrow(/host/);
      expect(() => parse(bad)).toThrow(JSON.stringify(bad).slice(0, 40));
    },
  );
});
