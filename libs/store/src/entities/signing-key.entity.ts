import 'reflect-metadata';
import { Column, Entity, PrimaryColumn } from 'typeorm';
import { bigintColumn } from '../json-columns';

/** The store's Ed25519 signing key (made on first use), which signs erasure certificates. */
@Entity({ name: 'signing_keys' })
export class SigningKeyEntity {
  @PrimaryColumn({ name: 'key_id', type: 'varchar', length: 64 })
  keyId!: string;

  @Column({ name: 'private_key_pem', type: 'text' })
  privateKeyPem!: string;

  @Column({ name: 'public_key_pem', type: 'text' })
  publicKeyPem!: string;

  @Column({ name: 'created_at_ms', type: 'bigint', transformer: bigintColumn })
  createdAtMs!: number;
}
