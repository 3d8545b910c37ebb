import { GroupStatsEntity } from './group-stats.entity';
import { PolicyEntity } from './policy.entity';
import { PolicyVersionEntity } from './policy-version.entity';
import { SkippedGroupEntity } from './skipped-group.entity';
import { UpdateGroupEntity } from './update-group.entity';
import { UpdateRecordEntity } from './update-record.entity';
import { ErasureEntity } from './erasure.entity';
import { SubjectKeyEntity } from './subject-key.entity';
import { SigningKeyEntity } from './signing-key.entity';

export {
  ErasureEntity,
  SigningKeyEntity,
  SubjectKeyEntity,
  GroupStatsEntity,
  PolicyEntity,
  PolicyVersionEntity,
  SkippedGroupEntity,
  UpdateGroupEntity,
  UpdateRecordEntity,
};

export const STORE_ENTITIES = [
  PolicyEntity,
  PolicyVersionEntity,
  UpdateRecordEntity,
  UpdateGroupEntity,
  SkippedGroupEntity,
  GroupStatsEntity,
  SubjectKeyEntity,
  ErasureEntity,
  SigningKeyEntity,
];
