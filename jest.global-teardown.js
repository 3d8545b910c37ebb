// Placeholder until the infra helpers exist; replaced below.
module.exports = async () => {};
