import { EnvReader } from './config';
import { ConfigError } from './errors';
import { parseBrokerList, readKafkaBrokers } from './kafka-brokers';

describe('KAFKA_BROKERS', () => {
  it('accepts host:port lists and names what is wrong otherwise', () => {
    expect(parseBrokerList('127.0.0.1:9092, kafka-1.internal:19092,[::1]:9092')).toEqual({
      ok: true,
      brokers: [
        { host: '127.0.0.1', port: 9092 },
        { host: 'kafka-1.internal', port: 19092 },
        { host: '[::1]', port: 9092 },
      ],
    });
    expect(parseBrokerList('not-a-broker')).toEqual({ ok: false, problem: '"not-a-broker" is not host:port' });
    expect(parseBrokerList('PLAINTEXT://h:9092')).toMatchObject({ ok: false, problem: expect.stringMatching(/scheme/) });
    expect(parseBrokerList('h:0')).toMatchObject({ ok: false, problem: expect.stringMatching(/outside/) });
    expect(parseBrokerList(' , ')).toEqual({ ok: false, problem: 'is empty' });
  });

  it('reads the list kafkajs takes, the fallback when unset', () => {
    expect(readKafkaBrokers(new EnvReader({ KAFKA_BROKERS: ' k1:9092, k2:9093 ,' }), ['local:9092'])).toEqual(['k1:9092', 'k2:9093']);
    expect(readKafkaBrokers(new EnvReader({}), ['local:9092'])).toEqual(['local:9092']);
    expect(readKafkaBrokers(new EnvReader({ KAFKA_BROKERS: '' }), ['local:9092'])).toEqual(['local:9092']);
  });

  it('refuses a value that is not a host:port list, naming the variable', () => {
    const read = (value: string) => () => readKafkaBrokers(new EnvReader({ KAFKA_BROKERS: value }), []);
    expect(read('not-a-broker')).toThrow(ConfigError);
    expect(read('not-a-broker')).toThrow('invalid configuration KAFKA_BROKERS: "not-a-broker" is not host:port');
    expect(read('h:9092,PLAINTEXT://k:9092')).toThrow(/^invalid configuration KAFKA_BROKERS: .*scheme/);
    expect(read(' , ')).toThrow('invalid configuration KAFKA_BROKERS: is empty');
  });
});
