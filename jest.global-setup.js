// Integration tests start the broker/PostgreSQL they need on demand (libs/testing/src/infra.ts);
// nothing is started here, so unit-only runs stay fast.
module.exports = async () => {
  process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';
};
