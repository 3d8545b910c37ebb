// Spec helpers of @srpo/hf: those of the libraries below it, through their test-only entries
// (the native backend and seeded values from @srpo/kernels/testing, makeSets from
// @srpo/policy/testing), so that no library reaches into another's test folder by path.
export { makeSets } from '@srpo/policy/testing';

export { nativeBackend, seededValues } from '@srpo/kernels/testing';
