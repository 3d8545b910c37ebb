export * from '../../policy/src/native-ops'; export * from '../../policy/src/fused-ops'; export * from '../../policy/src/srpo-kernels'; export * from '../../policy/src/fused-objective';
