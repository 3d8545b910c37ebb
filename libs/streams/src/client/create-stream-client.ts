import type { Kafka } from 'kafkajs';
import type { KafkaConnectionOptions } from '@srpo/events';
import { KafkajsStreamClient } from './kafkajs-stream-client';
import { PlatformaticStreamClient } from './platformatic-stream-client';
import type { StreamClient, StreamClientName } from './stream-client';

/** The runtime's client by name (`SRPO_KAFKA_CLIENT`); `kafka` is the kafkajs instance for the same connection. */
export function createStreamClient(name: StreamClientName, connection: KafkaConnectionOptions, kafka: Kafka): StreamClient {
  return name === 'platformatic' ? new PlatformaticStreamClient(connection, kafka) : new KafkajsStreamClient(kafka);
}
