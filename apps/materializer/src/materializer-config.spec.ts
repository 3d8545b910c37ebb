import * as os from 'os';
import * as path from 'path';
import { loadMaterializerConfig } from './materializer-config';

describe('loadMaterializerConfig: state store', () => {
  it('keeps state in LMDB under the temp directory by default, as Kafka Streams does', () => {
    const c = loadMaterializerConfig({});
    expect(c.stateDir).toBe(path.join(os.tmpdir(), 'srpo-state'));
    expect(c.stateCacheValues).toBe(4096);
    expect(c.killAtLocalWrite).toBeUndefined();
  });

  it('takes a directory, a cache size, memory stores, and the test-only kill point', () => {
    const c = loadMaterializerConfig({ SRPO_STATE_DIR: '/var/lib/srpo', SRPO_STATE_CACHE_VALUES: '100', SRPO_FAULT_KILL_AT_LOCAL_WRITE: '3' });
    expect([c.stateDir, c.stateCacheValues, c.killAtLocalWrite]).toEqual(['/var/lib/srpo', 100, 3]);
    expect(loadMaterializerConfig({ SRPO_STATE_STORE: 'memory' }).stateDir).toBeUndefined();
  });

  it('refuses bad values, naming the variable', () => {
    expect(() => loadMaterializerConfig({ SRPO_STATE_STORE: 'rocksdb' })).toThrow(/SRPO_STATE_STORE/);
    expect(() => loadMaterializerConfig({ SRPO_STATE_DIR: 'relative/dir' })).toThrow(/SRPO_STATE_DIR: must be an absolute path/);
    expect(() => loadMaterializerConfig({ SRPO_STATE_CACHE_VALUES: '2' })).toThrow(/SRPO_STATE_CACHE_VALUES/);
    expect(() => loadMaterializerConfig({ SRPO_FAULT_KILL_AT_LOCAL_WRITE: '0' })).toThrow(/SRPO_FAULT_KILL_AT_LOCAL_WRITE/);
  });
});

describe('loadMaterializerConfig: poison records', () => {
  it('dead-letters a record after 3 processor throws by default; SRPO_MAX_PROCESSING_ATTEMPTS sets it', () => {
    expect(loadMaterializerConfig({}).maxProcessingAttempts).toBe(3);
    expect(loadMaterializerConfig({ SRPO_MAX_PROCESSING_ATTEMPTS: '5' }).maxProcessingAttempts).toBe(5);
  });

  it('refuses fewer than one attempt, naming the variable', () => {
    expect(() => loadMaterializerConfig({ SRPO_MAX_PROCESSING_ATTEMPTS: '0' })).toThrow(/SRPO_MAX_PROCESSING_ATTEMPTS/);
    expect(() => loadMaterializerConfig({ SRPO_MAX_PROCESSING_ATTEMPTS: 'many' })).toThrow(/SRPO_MAX_PROCESSING_ATTEMPTS/);
  });
});

describe('loadMaterializerConfig: reward windows', () => {
  it('passes SRPO_REWARD_WINDOWS to the set stage, and refuses a bad one at start naming it', () => {
    expect(loadMaterializerConfig({ SRPO_REWARD_WINDOWS: 'ci=2h' }).rewardWindows).toEqual({ ci: 7_200_000 });
    expect(() => loadMaterializerConfig({ SRPO_REWARD_WINDOWS: 'ci=forever' })).toThrow(/SRPO_REWARD_WINDOWS/);
  });
});
