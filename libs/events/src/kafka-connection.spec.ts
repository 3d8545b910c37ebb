import { logLevel, LogEntry } from 'kafkajs';
import { ConfigError, EnvReader, Logger } from '@srpo/core';
import { forwardKafkaLog, isKafkaUnreachable, LOCAL_BROKER, readKafkaConnection } from './kafka-connection';

function entry(level: logLevel, message: string, extra: Record<string, unknown> = {}): LogEntry {
  return { namespace: 'Consumer', level, label: 'ERROR', log: { timestamp: 't', message, ...extra } };
}

describe('readKafkaConnection', () => {
  it('takes the checked KAFKA_BROKERS list, the local broker when unset', () => {
    expect(readKafkaConnection(new EnvReader({ KAFKA_BROKERS: 'k1:9092, k2:9092' }), 'c').brokers).toEqual(['k1:9092', 'k2:9092']);
    expect(readKafkaConnection(new EnvReader({}), 'c').brokers).toEqual([LOCAL_BROKER]);
    expect(() => readKafkaConnection(new EnvReader({ KAFKA_BROKERS: 'kafka://k1:9092' }), 'c')).toThrow(/^invalid configuration KAFKA_BROKERS: /);
  });

  const credentials = { KAFKA_SASL_USERNAME: 'srpo', KAFKA_SASL_PASSWORD: 'secret-password' };
  const failure = (env: Record<string, string>): ConfigError => {
    try {
      readKafkaConnection(new EnvReader(env), 'c');
    } catch (e) {
      return e as ConfigError;
    }
    throw new Error(`accepted ${JSON.stringify(env)}`);
  };

  it.each(['plain', 'scram-sha-256', 'scram-sha-512'])('refuses SASL %s without TLS, naming KAFKA_SASL_MECHANISM and not the password', (mechanism) => {
    const e = failure({ ...credentials, KAFKA_SASL_MECHANISM: mechanism });
    expect(e).toBeInstanceOf(ConfigError);
    expect(e.field).toBe('KAFKA_SASL_MECHANISM');
    expect(e.message).toMatch(new RegExp(`^invalid configuration KAFKA_SASL_MECHANISM: ${mechanism} without TLS: `));
    expect(e.message).toMatch(/KAFKA_ALLOW_SASL_PLAINTEXT=true/);
    expect(e.message).not.toContain('secret-password');
    // TLS turned off explicitly is no different.
    expect(failure({ ...credentials, KAFKA_SASL_MECHANISM: mechanism, KAFKA_SSL: 'false' }).field).toBe('KAFKA_SASL_MECHANISM');
    expect(failure({ ...credentials, KAFKA_SASL_MECHANISM: mechanism, KAFKA_ALLOW_SASL_PLAINTEXT: 'false' }).field).toBe('KAFKA_SASL_MECHANISM');
  });

  it('says why for plain: the password in clear', () => {
    expect(failure({ ...credentials, KAFKA_SASL_MECHANISM: 'plain' }).message).toMatch(/the password would cross the network in clear/);
  });

  it('takes SASL over TLS, and SASL without TLS only when KAFKA_ALLOW_SASL_PLAINTEXT=true', () => {
    const sasl = { mechanism: 'scram-sha-512', username: 'srpo', password: 'secret-password' };
    const overTls = readKafkaConnection(new EnvReader({ ...credentials, KAFKA_SASL_MECHANISM: 'scram-sha-512', KAFKA_SSL: 'true' }), 'c');
    expect([overTls.sasl, overTls.ssl?.rejectUnauthorized]).toEqual([sasl, true]);
    // A CA file alone turns TLS on.
    expect(readKafkaConnection(new EnvReader({ ...credentials, KAFKA_SASL_MECHANISM: 'scram-sha-512', KAFKA_SSL_CA_FILE: '/ca.pem' }), 'c').sasl).toEqual(sasl);
    const allowed = readKafkaConnection(new EnvReader({ ...credentials, KAFKA_SASL_MECHANISM: 'plain', KAFKA_ALLOW_SASL_PLAINTEXT: 'true' }), 'c');
    expect([allowed.sasl?.mechanism, allowed.ssl]).toEqual(['plain', undefined]);
    expect(failure({ ...credentials, KAFKA_SASL_MECHANISM: 'plain', KAFKA_ALLOW_SASL_PLAINTEXT: 'maybe' }).field).toBe('KAFKA_ALLOW_SASL_PLAINTEXT');
  });

  it('still names a missing credential before the missing TLS', () => {
    expect(failure({ KAFKA_SASL_MECHANISM: 'plain' }).field).toBe('KAFKA_SASL_USERNAME');
    expect(failure({ KAFKA_SASL_MECHANISM: 'plain', KAFKA_SASL_USERNAME: 'srpo' }).field).toBe('KAFKA_SASL_PASSWORD');
  });

  it('asks nothing of TLS without SASL', () => {
    expect(readKafkaConnection(new EnvReader({}), 'c')).toEqual({ brokers: [LOCAL_BROKER], clientId: 'c' });
  });
});

describe('forwardKafkaLog', () => {
  const lines: { level: string; msg: string }[] = [];
  beforeAll(() => Logger.configure({ level: 'debug', sink: { write: (l) => lines.push(JSON.parse(l) as { level: string; msg: string }) } }));
  afterAll(() => Logger.configure({ level: 'info', sink: { write: (l) => process.stderr.write(l + '\n') } }));
  beforeEach(() => (lines.length = 0));

  it('logs kafkajs restarting its own consumer after a retriable crash as a warning, not an error', () => {
    forwardKafkaLog(new Logger('kafkajs'), entry(logLevel.ERROR, 'Restarting the consumer in 200ms', { retryTime: 200 }));
    expect(lines.map((l) => [l.level, l.msg])).toEqual([['warn', 'Restarting the consumer in 200ms']]);
  });

  it('keeps other errors as errors, and retried coordinator errors at debug', () => {
    const log = new Logger('kafkajs');
    forwardKafkaLog(log, entry(logLevel.ERROR, 'Crash: KafkaJSNonRetriableError'));
    forwardKafkaLog(log, entry(logLevel.ERROR, 'Response GroupCoordinator', { error: 'The group coordinator is not available' }));
    expect(lines.map((l) => l.level)).toEqual(['error', 'debug']);
  });

  it('leaves CreateTopics answers with per-topic errors to the caller that handles them (debug)', () => {
    const log = new Logger('kafkajs');
    forwardKafkaLog(log, entry(logLevel.ERROR, 'Response CreateTopics(key: 19, version: 3)', { error: 'Topic creation errors', correlationId: 4 }));
    forwardKafkaLog(log, entry(logLevel.ERROR, 'Response CreateTopics(key: 19, version: 3)', { error: 'Cluster authorization failed' }));
    expect(lines.map((l) => l.level)).toEqual(['debug', 'error']);
  });
});

describe('isKafkaUnreachable', () => {
  // kafkajs's own error classes, as its retrier and connections throw them.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const k = require('kafkajs/src/errors') as Record<string, new (e: unknown, o?: Record<string, unknown>) => Error>;

  it('sees a broker out of reach through kafkajs wrappers and cause chains', () => {
    const refused = new k.KafkaJSConnectionError('Connection error: connect ECONNREFUSED 127.0.0.1:19492', { broker: '127.0.0.1:19492' });
    const spent = new k.KafkaJSNonRetriableError(refused);
    expect((spent as unknown as { retriable: boolean }).retriable).toBe(false);
    expect(isKafkaUnreachable(refused)).toBe(true);
    expect(isKafkaUnreachable(spent)).toBe(true);
    expect(isKafkaUnreachable(new Error('start failed', { cause: new k.KafkaJSConnectionError('Connection timeout') }))).toBe(true);
  });

  it('leaves other failures alone', () => {
    expect(isKafkaUnreachable(new k.KafkaJSNonRetriableError(new Error('Topic authorization failed')))).toBe(false);
    expect(isKafkaUnreachable(new Error('invalid configuration KAFKA_BROKERS: must be host:port'))).toBe(false);
    expect(isKafkaUnreachable(undefined)).toBe(false);
  });
});
