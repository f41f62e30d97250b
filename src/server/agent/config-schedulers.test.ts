import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import { parseAgentConfig } from './config.js';

const parse = (scheduler: unknown) => parseAgentConfig({ sysfs_root: '/', scheduler }, {}, '/tmp');

describe('agent config: scheduler', () => {
  it('takes one address or a list (schedulers sharing one database), in order, without repeats', () => {
    expect(parse('a:1')).toMatchObject({ scheduler: 'a:1', schedulers: ['a:1'] });
    expect(parse(['a:1', 'b:2', 'a:1'])).toMatchObject({ scheduler: 'a:1', schedulers: ['a:1', 'b:2'] });
    expect(parseAgentConfig({ sysfs_root: '/' }, {}, '/tmp')).toMatchObject({
      scheduler: null,
      schedulers: [],
    });
  });

  it('names the bad entry', () => {
    expect(() => parse(['a:1', 'no-port'])).toThrow(ConfigError);
    expect(() => parse(['a:1', 'no-port'])).toThrow(/scheduler.*no-port/);
    expect(() => parse([])).toThrow(/scheduler/);
  });
});
